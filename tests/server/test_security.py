"""`txlog serve` listeners: loopback unless told otherwise, TLS, SASL PLAIN and SCRAM, with real clients."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kafka import KafkaAdminClient

from tests.server.serve_process import ServeProcess, _env

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORD = "correct horse, battery=staple"  # a comma and an equals sign: SCRAM's message syntax must not trip on them
WAIT_S = 60.0


def _txlog(*args: str, stdin: str = "", cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def credentials(tmp_path) -> str:
    """alice has SCRAM credentials only (made by the documented command); bob has a PLAIN line."""
    path = str(tmp_path / "users.txt")
    made = _txlog("serve", "--sasl-credentials", path, "--add-scram-user", "alice", stdin=PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    with open(path, "a", encoding="utf-8") as f:
        f.write("# a development user\nbob PLAIN password=bob-secret\n")
    return path


def _sasl_server(
    tmp_path, credentials: str, protocol: str = "SASL_PLAINTEXT", extra: tuple[str, ...] = ()
) -> ServeProcess:
    return ServeProcess(
        str(tmp_path / "store"), protocol=protocol, args=["--sasl-credentials", credentials, *extra]
    ).start()


def _confluent(bootstrap: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "socket.timeout.ms": 30000, **extra}


def _sasl(protocol: str, mechanism: str, user: str, password: str) -> dict[str, object]:
    return {
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _first_error(config: dict[str, object], codes: tuple[int, ...] = ()) -> KafkaError:
    """The first error (of `codes`, if given) librdkafka reports for a client that cannot connect (it retries)."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = [e for e in errors if not codes or e.code() in codes]
        if found:
            return found[0]
        producer.poll(0.2)
    raise AssertionError(f"librdkafka reported no error of {codes}: {errors}")


def _logged(server: ServeProcess, text: str) -> bool:
    """Has the server written `text` on stderr? (It logs a closed connection just after closing it.)"""
    deadline = time.monotonic() + WAIT_S
    while text not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    return text in server.log()


# ---- SASL with real clients --------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_logs_in_with_each_mechanism_and_a_wrong_password_is_an_authentication_error(
    tmp_path, credentials, mechanism
):
    server = _sasl_server(tmp_path, credentials)
    try:
        good = AdminClient(_confluent(server.bootstrap, **_sasl("SASL_PLAINTEXT", mechanism, "alice", PASSWORD)))
        assert "made-by-alice" in good.list_topics("made-by-alice", timeout=WAIT_S).topics
        error = _first_error(_confluent(server.bootstrap, **_sasl("SASL_PLAINTEXT", mechanism, "alice", "wrong")))
        assert error.code() == KafkaError._AUTHENTICATION
        assert "Authentication failed" in error.str()
        # bob's PLAIN line logs him in with the SCRAM mechanisms too (credentials derived when the file is read)
        bob = AdminClient(_confluent(server.bootstrap, **_sasl("SASL_PLAINTEXT", mechanism, "bob", "bob-secret")))
        assert "made-by-alice" in bob.list_topics(timeout=WAIT_S).topics
    finally:
        server.kill()
    assert PASSWORD not in server.log() and "wrong" not in server.log()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_logs_in_with_each_mechanism(tmp_path, credentials, mechanism):
    server = _sasl_server(tmp_path, credentials)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=server.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        assert admin.list_topics() == []
        admin.close()
    finally:
        server.kill()


def test_kafka_python_with_a_wrong_scram_password_fails_authentication(tmp_path, credentials, caplog):
    server = _sasl_server(tmp_path, credentials)
    caplog.set_level(logging.WARNING, logger="kafka")
    # kafka-python 3.0.12's KafkaAdminClient starts its I/O thread before it bootstraps, and when the
    # bootstrap raises out of __init__ the caller has nothing to close: the thread would retry for the
    # rest of the run. Its `kafka_client` factory hands the network client over, to be closed here.
    made = []

    def kafka_client(**configs):
        made.append(KafkaAdminClient.DEFAULT_CONFIG["kafka_client"](**configs))
        return made[-1]

    try:
        with pytest.raises(Exception):  # noqa: B017 - kafka-python gives up bootstrapping; the reason is in its log
            KafkaAdminClient(
                bootstrap_servers=server.bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="alice",
                sasl_plain_password="wrong",
                bootstrap_timeout_ms=10000,
                kafka_client=kafka_client,
            )
        assert _logged(server, "ended: SCRAM-SHA-256 authentication failed")
    finally:
        for client in made:
            client.close()
        server.kill()
    # kafka-python 3.0.12 drops what arrives in the same read as the connection's end
    # (kafka/net/transport.py, _sock_recv), and the server closes right after its answer, as a
    # broker does: on a loaded machine the client may see only the close. The answer itself is
    # checked on the wire by test_requests_before_authentication_close_the_connection_and_api_versions_is_answered.
    if "SaslAuthenticationFailedError" in caplog.text:
        assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in caplog.text
    else:
        assert "socket disconnected" in caplog.text


def test_only_the_enabled_mechanisms_are_offered(tmp_path, credentials):
    server = _sasl_server(tmp_path, credentials, extra=("--sasl-enabled-mechanisms", "SCRAM-SHA-512"))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(17, 1, 1, _string("PLAIN")))
            answer = _read_answer(s)
            (error_code, count) = struct.unpack_from(">hi", answer, 4)
            assert error_code == 33  # UNSUPPORTED_SASL_MECHANISM, with the enabled list
            assert answer[10:] == _string("SCRAM-SHA-512")
            assert count == 1 and _read_answer(s) == b""  # and the connection is closed
        error = _first_error(_confluent(server.bootstrap, **_sasl("SASL_PLAINTEXT", "PLAIN", "bob", "bob-secret")))
        assert error.code() == KafkaError._AUTHENTICATION
    finally:
        server.kill()


# ---- SASL on the wire: what is refused before authentication ------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + _string("test")
    return struct.pack(">i", len(header) + len(body)) + header + body


def _read_answer(s: socket.socket) -> bytes:
    """One response frame (correlation id first), or b"" once the server has closed the connection."""
    data = b""
    while len(data) < 4:
        chunk = s.recv(4 - len(data))
        if not chunk:
            return b""
        data += chunk
    (size,) = struct.unpack(">i", data)
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return b""
        body += chunk
    return body


def test_requests_before_authentication_close_the_connection_and_api_versions_is_answered(tmp_path, credentials):
    server = _sasl_server(tmp_path, credentials)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(18, 0, 1))  # ApiVersions: allowed, clients ask it first
            assert struct.unpack_from(">ih", _read_answer(s)) == (1, 0)
            s.sendall(_request(3, 1, 2, struct.pack(">i", -1)))  # Metadata v1, all topics
            assert _read_answer(s) == b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(36, 0, 3, struct.pack(">i", 3) + b"abc"))  # SaslAuthenticate before SaslHandshake
            assert struct.unpack_from(">ih", _read_answer(s)) == (3, 34)  # ILLEGAL_SASL_STATE
            assert _read_answer(s) == b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(17, 1, 4, _string("PLAIN")))
            assert struct.unpack_from(">ih", _read_answer(s)) == (4, 0)
            token = b"\0alice\0" + b"x" * 5000  # past the token limit
            s.sendall(_request(36, 0, 5, struct.pack(">i", len(token)) + token))
            assert struct.unpack_from(">ih", _read_answer(s)) == (5, 58)  # SASL_AUTHENTICATION_FAILED
            assert _read_answer(s) == b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(struct.pack(">i", 1_000_000))  # an unauthenticated client may not announce a large frame
            assert _read_answer(s) == b""
        assert _logged(server, "Metadata before authentication")
        assert _logged(server, "before authentication is past 524288")
    finally:
        server.kill()


def test_a_plain_login_reaches_every_api_and_handshake_again_is_illegal(tmp_path, credentials):
    server = _sasl_server(tmp_path, credentials)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(17, 1, 1, _string("PLAIN")))
            assert struct.unpack_from(">ih", _read_answer(s)) == (1, 0)
            token = b"\0bob\0bob-secret"
            s.sendall(_request(36, 1, 2, struct.pack(">i", len(token)) + token))
            answer = _read_answer(s)
            assert struct.unpack_from(">ih", answer) == (2, 0)
            assert answer.endswith(struct.pack(">q", 0))  # session_lifetime_ms 0: no re-authentication
            s.sendall(_request(3, 1, 3, struct.pack(">i", -1)))  # Metadata now answered
            assert struct.unpack_from(">i", _read_answer(s)) == (3,)
            s.sendall(_request(17, 1, 4, _string("PLAIN")))
            assert struct.unpack_from(">ih", _read_answer(s)) == (4, 34)  # ILLEGAL_SASL_STATE, as KafkaApis answers
    finally:
        server.kill()


# ---- TLS ---------------------------------------------------------------------------------------------------


def _write_pem(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _certificate(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by the CA (PEM files)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txlog test CA")])
    ca = _certificate("txlog test CA", ca_key, ca_name, ca_key, ca=True)
    files = {"ca": _write_pem(tmp_path / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))}
    for who in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(who, key, ca_name, ca_key, ca=False)
        files[f"{who}_cert"] = _write_pem(tmp_path / f"{who}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        files[f"{who}_key"] = _write_pem(tmp_path / f"{who}-key.pem", key_pem)
    return files


def _tls_args(pki: dict[str, str]) -> list[str]:
    return ["--ssl-certfile", pki["server_cert"], "--ssl-keyfile", pki["server_key"]]


def test_ssl_listener_with_confluent_kafka_and_kafka_python(tmp_path, pki):
    server = ServeProcess(str(tmp_path / "store"), protocol="SSL", args=_tls_args(pki)).start()
    try:
        tls = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
        assert (
            "over-tls"
            in AdminClient(_confluent(server.bootstrap, **tls)).list_topics("over-tls", timeout=WAIT_S).topics
        )
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, security_protocol="SSL", ssl_cafile=pki["ca"])
        assert admin.list_topics() == ["over-tls"]
        admin.close()
        # A client that speaks plaintext to a TLS listener gets nowhere.
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(_request(18, 0, 1))
            assert _read_answer(s) == b""
    finally:
        server.kill()


def _tls_socket(server: ServeProcess, cafile: str, client: tuple[str, str] | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=cafile)
    if client is not None:
        context.load_cert_chain(*client)
    return context.wrap_socket(
        socket.create_connection(("127.0.0.1", server.port), timeout=30), server_hostname="127.0.0.1"
    )


def test_ssl_with_client_auth_required_refuses_a_client_without_a_certificate(tmp_path, pki):
    args = [*_tls_args(pki), "--ssl-cafile", pki["ca"]]
    server = ServeProcess(str(tmp_path / "store"), protocol="SSL", args=args).start()
    try:
        tls = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
        mutual = {**tls, "ssl.certificate.location": pki["client_cert"], "ssl.key.location": pki["client_key"]}
        assert AdminClient(_confluent(server.bootstrap, **mutual)).list_topics(timeout=WAIT_S).brokers
        # librdkafka only logs the TLS alert, so the refusal is checked with Python's own TLS client.
        with _tls_socket(server, pki["ca"], None) as s:
            try:  # TLS 1.3: the server's alert arrives after the client's side of the handshake has ended
                s.sendall(_request(18, 0, 1))
                answer = _read_answer(s)
            except (ssl.SSLError, ConnectionError):
                answer = b""
            assert answer == b""
        with _tls_socket(server, pki["ca"], (pki["client_cert"], pki["client_key"])) as s:
            s.sendall(_request(18, 0, 1))
            assert struct.unpack_from(">ih", _read_answer(s)) == (1, 0)
    finally:
        server.kill()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_ssl_listener(tmp_path, credentials, pki, mechanism):
    server = _sasl_server(tmp_path, credentials, protocol="SASL_SSL", extra=tuple(_tls_args(pki)))
    try:
        config = {**_sasl("SASL_SSL", mechanism, "alice", PASSWORD), "ssl.ca.location": pki["ca"]}
        assert AdminClient(_confluent(server.bootstrap, **config)).list_topics(timeout=WAIT_S).brokers
        admin = KafkaAdminClient(
            bootstrap_servers=server.bootstrap,
            security_protocol="SASL_SSL",
            ssl_cafile=pki["ca"],
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        assert admin.list_topics() == []
        admin.close()
        bad = _first_error(_confluent(server.bootstrap, **{**config, "sasl.password": "wrong"}))
        assert bad.code() == KafkaError._AUTHENTICATION
    finally:
        server.kill()


# ---- what the command line refuses --------------------------------------------------------------------------


def _refused(tmp_path, *args: str, exit_code: int = 2) -> str:
    """Run `txlog serve` with args that must be refused: one Error line, exit 2 (usage) or 1, no store created."""
    store = tmp_path / "never"
    result = _txlog("--data-dir", str(store), "serve", *args)
    assert result.returncode == exit_code, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert not store.exists()
    return lines[0]


def test_an_anonymous_listener_off_loopback_is_refused_unless_allowed(tmp_path):
    line = _refused(tmp_path, "--listen", "0.0.0.0:0")
    assert "--allow-anonymous-remote" in line
    assert "--allow-anonymous-remote" in _refused(tmp_path, "--listen", "PLAINTEXT://:0")
    server = ServeProcess(str(tmp_path / "store"), args=["--listen", "0.0.0.0:0", "--allow-anonymous-remote"]).start()
    try:
        assert AdminClient(_confluent(server.bootstrap)).list_topics(timeout=WAIT_S).brokers
    finally:
        server.kill()


def test_an_ssl_listener_off_loopback_needs_client_certificates(tmp_path, pki, credentials):
    assert "--allow-anonymous-remote" in _refused(tmp_path, "--listen", "SSL://0.0.0.0:0", *_tls_args(pki))
    server = ServeProcess(
        str(tmp_path / "store"),
        args=["--listen", "SSL://0.0.0.0:0", *_tls_args(pki), "--ssl-cafile", pki["ca"]],
    ).start()
    server.kill()
    server = ServeProcess(
        str(tmp_path / "store"), args=["--listen", "SASL_PLAINTEXT://0.0.0.0:0", "--sasl-credentials", credentials]
    ).start()
    server.kill()


def test_missing_or_wrong_security_options_are_one_error_line(tmp_path, pki):
    assert "--sasl-credentials" in _refused(tmp_path, "--listen", "SASL_PLAINTEXT://127.0.0.1:0")
    assert "--ssl-certfile" in _refused(tmp_path, "--listen", "SSL://127.0.0.1:0")
    assert "no --listen is SSL" in _refused(tmp_path, "--ssl-certfile", pki["server_cert"])
    assert "not one of" in _refused(tmp_path, "--listen", "SASL_GSSAPI://127.0.0.1:0")
    wrong_key = _refused(
        tmp_path,
        "--listen",
        "SSL://127.0.0.1:0",
        "--ssl-certfile",
        pki["server_cert"],
        "--ssl-keyfile",
        pki["ca"],
        exit_code=1,
    )
    assert "cannot load --ssl-certfile" in wrong_key
    missing = tmp_path / "nope.txt"
    assert "nope.txt" in _refused(
        tmp_path, "--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-credentials", str(missing), exit_code=1
    )
    assert "KERBEROS" in _refused(
        tmp_path, "--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-credentials", pki["ca"],
        "--sasl-enabled-mechanisms", "PLAIN,KERBEROS",
    )  # fmt: skip


def test_a_bad_credentials_line_names_its_line_and_never_echoes_a_password(tmp_path):
    path = tmp_path / "users.txt"
    path.write_text("# users\nalice SCRAM-SHA-256 salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=1000\n")
    line = _refused(tmp_path, "--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-credentials", str(path), exit_code=1)
    assert "line 2" in line and "4096" in line
    path.write_text("carol PLAIN pasword=topsecret\n")
    line = _refused(tmp_path, "--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-credentials", str(path), exit_code=1)
    assert "line 1" in line and "topsecret" not in line


def test_add_scram_user_keeps_no_password_and_replaces_the_users_entries(tmp_path):
    path = str(tmp_path / "users.txt")
    for password in ("first-password", "second-password"):
        made = _txlog(
            "serve",
            "--sasl-credentials",
            path,
            "--add-scram-user",
            "dave",
            "--scram-iterations",
            "8192",
            stdin=password,
        )
        assert made.returncode == 0, made.stderr
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert [line.split(" ")[:2] for line in lines] == [["dave", "SCRAM-SHA-256"], ["dave", "SCRAM-SHA-512"]]
    assert all(line.endswith("iterations=8192") and "password" not in line for line in lines)
    assert os.stat(path).st_mode & 0o077 == 0  # readable by its owner only
    refused = _txlog(
        "serve", "--sasl-credentials", path, "--add-scram-user", "dave", "--scram-iterations", "1000", stdin="pw"
    )
    assert refused.returncode == 2 and refused.stderr.startswith("Error: ") and "4096" in refused.stderr


# ---- the Java clients ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_java_kafka_topics_over_sasl_ssl_with_a_client_properties_file(tmp_path, credentials, pki, mechanism):
    from tests.kafka_rig.kafka_dist import run_tool

    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="alice" password="{PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki['ca']}\n"
    )
    server = _sasl_server(tmp_path, credentials, protocol="SASL_SSL", extra=tuple(_tls_args(pki)))
    try:
        config = {**_sasl("SASL_SSL", mechanism, "alice", PASSWORD), "ssl.ca.location": pki["ca"]}
        AdminClient(_confluent(server.bootstrap, **config)).list_topics("from-python", timeout=WAIT_S)
        listed = run_tool(
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            server.bootstrap,
            "--command-config",
            str(properties),
            "--list",
        )
        assert listed.stdout.split() == ["from-python"]
    finally:
        server.kill()
