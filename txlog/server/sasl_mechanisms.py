"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), as Kafka runs them.

A mechanism is fed the client's tokens one at a time (`evaluate`) and answers each with the
server's token, until `complete`; every failure is a SaslAuthenticationFailedError whose message
the client may see. The details follow Kafka's PlainSaslServer and ScramSaslServer: PLAIN's
authorization id, if given, must equal the user name; SCRAM takes no channel binding (`n,,` or
`y,,` headers only), user names in SCRAM's `=2C`/`=3D` escaping, and the client's extensions
are ignored (Kafka reads only `tokenauth`, for delegation tokens, which txlog does not have).
Secrets are compared in constant time, and an unknown SCRAM user gets a made-up salt so that the
first answer does not say whether the user exists.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets

from txlog.errors import SaslAuthenticationFailedError
from txlog.server.credentials import MIN_ITERATIONS, PLAIN, SCRAM_HASHES, Credentials, ScramCredential

# Kafka's words for a failed login: the same for a wrong password and an unknown user.
PLAIN_FAILED = "Authentication failed: Invalid username or password"

_CLIENT_FIRST = re.compile(
    r"^(?P<gs2>[ny],(?:a=(?P<authzid>[^,]*))?,)(?P<bare>(?:m=[^,]*,)?n=(?P<user>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?:,.*)?)$",
    re.DOTALL,
)
_CLIENT_FINAL = re.compile(r"^(?P<without_proof>c=(?P<cbind>[^,]*),r=(?P<nonce>[^,]*)(?:,[^,]*)*?),p=(?P<proof>[^,]*)$")


class Mechanism:
    """One login in progress: feed the client's tokens to `evaluate` until `complete`; `user` is who logged in."""

    name: str
    complete: bool = False
    user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


def mechanism_server(name: str, credentials: Credentials) -> Mechanism:
    """A fresh server for mechanism `name` (one of credentials.MECHANISMS)."""
    if name == PLAIN:
        return PlainServer(credentials)
    return ScramServer(name, credentials)


class PlainServer(Mechanism):
    """RFC 4616: one client message `authzid NUL authcid NUL passwd`, an empty answer."""

    name = PLAIN

    def __init__(self, credentials: Credentials):
        self.credentials = credentials

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailedError("PLAIN authentication has already completed")
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise SaslAuthenticationFailedError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationFailedError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailedError("Authentication failed: password not specified")
        if not self.credentials.check_plain(user, password):
            raise SaslAuthenticationFailedError(PLAIN_FAILED)
        if authzid and authzid != user:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.user, self.complete = user, True
        return b""


class ScramServer(Mechanism):
    """RFC 5802 in two rounds: client-first -> server-first (nonce, salt, iterations); client-final -> server-final."""

    def __init__(self, name: str, credentials: Credentials):
        self.name = name
        self.digest = SCRAM_HASHES[name]
        self.credentials = credentials
        self._first: tuple[str, str, str, str] | None = None  # gs2 header, client-first-bare, server-first, nonce
        self._credential: ScramCredential | None = None
        self._user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise self._failed()
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed() from None
        if self._first is None:
            return self._server_first(text).encode()
        return self._server_final(text).encode()

    def _server_first(self, text: str) -> str:
        match = _CLIENT_FIRST.match(text)
        if match is None:
            raise self._failed()
        user = _saslname(match["user"])
        if match["authzid"] and _saslname(match["authzid"]) != user:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self.credentials.scram(user, self.name)
        salt, iterations = (
            (credential.salt, credential.iterations) if credential else (self._decoy_salt(user), MIN_ITERATIONS)
        )
        nonce = match["nonce"] + secrets.token_urlsafe(24)
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._first = (match["gs2"], match["bare"], server_first, nonce)
        self._credential, self._user = credential, user
        return server_first

    def _server_final(self, text: str) -> str:
        assert self._first is not None
        gs2, bare, server_first, nonce = self._first
        match = _CLIENT_FINAL.match(text)
        if match is None or not hmac.compare_digest(match["nonce"].encode(), nonce.encode()):
            raise self._failed()
        if match["cbind"] != base64.b64encode(gs2.encode()).decode():  # no channel binding data: c= is the header
            raise self._failed()
        try:
            proof = base64.b64decode(match["proof"], validate=True)
        except (binascii.Error, ValueError):
            raise self._failed() from None
        credential = self._credential
        if credential is None or len(proof) != len(credential.stored_key):
            raise self._failed()
        auth_message = f"{bare},{server_first},{match['without_proof']}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self.digest)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), credential.stored_key):
            raise self._failed()
        server_signature = hmac.digest(credential.server_key, auth_message, self.digest)
        self.user, self.complete = self._user, True
        return "v=" + base64.b64encode(server_signature).decode()

    def _decoy_salt(self, user: str) -> bytes:
        """A salt for a user with no credential: stable per user within this server, so two tries look alike."""
        return hmac.digest(_DECOY_KEY, user.encode(), "sha256")

    def _failed(self) -> SaslAuthenticationFailedError:
        # Kafka's answer to any SaslException: it does not say whether the user or the proof was wrong.
        return SaslAuthenticationFailedError(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {self.name}"
        )


_DECOY_KEY = secrets.token_bytes(32)


def _saslname(text: str) -> str:
    """RFC 5802's saslname: `=2C` is a comma, `=3D` an equals sign, any other `=` is malformed."""
    if re.search(r"=(?!2C|3D)", text):
        raise SaslAuthenticationFailedError("Authentication failed: invalid user name encoding")
    return text.replace("=2C", ",").replace("=3D", "=")
