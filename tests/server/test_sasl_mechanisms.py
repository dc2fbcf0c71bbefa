"""The SCRAM and PLAIN servers against the RFC's own exchange and against malformed or wrong client messages."""

from __future__ import annotations

import base64

import pytest

from txlog.errors import InvalidConfigurationError, SaslAuthenticationFailedError
from txlog.server import sasl_mechanisms
from txlog.server.credentials import Credentials, add_scram_user, load_credentials, scram_credential
from txlog.server.sasl_mechanisms import PlainServer, ScramServer

# RFC 7677 §3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class _FixedNonce:
    @staticmethod
    def token_urlsafe(_: int) -> str:
        return RFC7677_SERVER_NONCE


@pytest.fixture
def rfc_user(monkeypatch) -> Credentials:
    monkeypatch.setattr(sasl_mechanisms, "secrets", _FixedNonce)
    credentials = Credentials()
    credentials.add_scram("user", "SCRAM-SHA-256", scram_credential("SCRAM-SHA-256", "pencil", salt=RFC7677_SALT))
    return credentials


def test_the_scram_sha_256_server_answers_rfc_7677s_exchange_byte_for_byte(rfc_user):
    server = ScramServer("SCRAM-SHA-256", rfc_user)
    assert server.evaluate(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.evaluate(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert (server.complete, server.user) == (True, "user")


@pytest.mark.parametrize(
    "client_final",
    [
        RFC7677_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"),  # a wrong proof
        RFC7677_CLIENT_FINAL.replace(b"r=rOprNG", b"r=xOprNG"),  # not the nonce the server chose
        RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # claims channel binding
        b"c=biws,p=AAAA",  # malformed
        b"\xff\xfe",  # not UTF-8
    ],
)
def test_a_wrong_scram_final_message_fails_without_saying_why(rfc_user, client_final):
    server = ScramServer("SCRAM-SHA-256", rfc_user)
    server.evaluate(RFC7677_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        server.evaluate(client_final)
    assert not server.complete


def test_an_unknown_scram_user_gets_a_salt_and_fails_only_at_the_proof(rfc_user):
    server = ScramServer("SCRAM-SHA-256", rfc_user)
    first = server.evaluate(b"n,,n=mallory,r=abc")
    assert b",s=" in first and first.endswith(b",i=4096")
    again = ScramServer("SCRAM-SHA-256", rfc_user).evaluate(b"n,,n=mallory,r=abc")
    assert first.split(b",")[1] == again.split(b",")[1]  # the same made-up salt each time, as a real user's
    with pytest.raises(SaslAuthenticationFailedError):
        server.evaluate(b"c=biws,r=" + first.split(b",")[0][2:] + b",p=" + base64.b64encode(b"x" * 32))


def test_plain_checks_the_password_against_a_scram_credential_and_the_authorization_id(rfc_user):
    assert PlainServer(rfc_user).evaluate(b"\0user\0pencil") == b""
    for token in (b"\0user\0pencils", b"\0nobody\0pencil", b"user\0pencil", b"other\0user\0pencil"):
        with pytest.raises(SaslAuthenticationFailedError):
            PlainServer(rfc_user).evaluate(token)


def test_a_credentials_file_round_trips_and_refuses_a_duplicate(tmp_path):
    path = str(tmp_path / "users")
    add_scram_user(path, "erin", "pw-1")
    with open(path, "a", encoding="utf-8") as f:
        f.write("frank PLAIN password=with spaces and = signs \n")
    credentials = load_credentials(path)
    assert credentials.check_plain("erin", "pw-1") and not credentials.check_plain("erin", "pw-2")
    assert credentials.check_plain("frank", "with spaces and = signs ")
    assert credentials.scram("frank", "SCRAM-SHA-512") is not None
    with open(path, "a", encoding="utf-8") as f:
        f.write("frank PLAIN password=again\n")
    with pytest.raises(InvalidConfigurationError, match="line 4: a second PLAIN entry for user frank"):
        load_credentials(path)
