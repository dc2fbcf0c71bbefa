"""The SASL users of `txlog serve`: the credentials file, SCRAM's salted credentials, password checks.

The file (`txlog serve --sasl-credentials FILE`) has one credential per line, `#` starts a
comment line, and the user name comes first (no spaces in it):

    alice SCRAM-SHA-256 salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=4096
    alice SCRAM-SHA-512 salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=4096
    bob PLAIN password=the rest of the line is the password

A SCRAM line is Kafka's own text form of a SCRAM credential (ScramCredentialUtils in Kafka's
clients): the salted password is kept as RFC 5802's StoredKey and ServerKey, never the password,
with at least 4096 iterations (Kafka's minimum for both SHA-256 and SHA-512). `txlog serve
--add-scram-user NAME` writes such lines from a password read once and not kept. A PLAIN line
keeps a password in the clear, as Kafka's PLAIN JAAS config does (`user_bob="..."`); it is
the quick way for a development setup, and such a user may log in with every mechanism (its
SCRAM credentials are derived when the file is read). PLAIN logins of a user that has only
SCRAM lines are checked against the SCRAM credential: the password is salted and compared
with the StoredKey, so no clear password needs to be on disk at all.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from txlog.errors import InvalidConfigurationError

PLAIN = "PLAIN"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = (PLAIN, *SCRAM_HASHES)
# Kafka's ScramMechanism: 4096 is the minimum iteration count of both SHA-256 and SHA-512, 16384 the maximum.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 32  # Kafka's ScramFormatter.secureRandomBytes() is 32 bytes too


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """RFC 5802's server-side credential: what a SCRAM exchange needs, and not the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's text form: `salt=...,stored_key=...,server_key=...,iterations=N` (base64 values)."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )


def scram_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """The SCRAM credential of `password` (RFC 5802 §3), with a fresh random salt unless one is given."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    salted = salted_password(mechanism, password, salt, iterations)
    digest = SCRAM_HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", digest)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", digest),
        iterations=iterations,
    )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC.

    Kafka uses the password's UTF-8 bytes without SASLprep; so does this, so a credential made
    here and one made by kafka-configs.sh for the same password are interchangeable.
    """
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


class Credentials:
    """Every user's credentials from the file: a SCRAM credential per mechanism, a password for PLAIN lines."""

    def __init__(self) -> None:
        self._scram: dict[tuple[str, str], ScramCredential] = {}
        self._plain: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len({user for user, _ in self._scram} | set(self._plain))

    def add_scram(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._scram[(user, mechanism)] = credential

    def add_plain(self, user: str, password: str) -> None:
        self._plain[user] = password.encode("utf-8")
        for mechanism in SCRAM_HASHES:
            self._scram.setdefault((user, mechanism), scram_credential(mechanism, password))

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get((user, mechanism))

    def check_plain(self, user: str, password: str) -> bool:
        """Does `password` log `user` in over PLAIN? Constant time in the password's bytes."""
        given = password.encode("utf-8")
        known = self._plain.get(user)
        if known is not None:
            return hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(known).digest())
        for mechanism in SCRAM_HASHES:
            credential = self._scram.get((user, mechanism))
            if credential is not None:
                expected = scram_credential(mechanism, password, salt=credential.salt, iterations=credential.iterations)
                return hmac.compare_digest(expected.stored_key, credential.stored_key)
        # An unknown user costs the same PBKDF2 as a known one, so timing does not tell which users exist.
        salted_password("SCRAM-SHA-256", password, b"\0" * SALT_BYTES, MIN_ITERATIONS)
        return False


# ---- the file -------------------------------------------------------------------------------------------


def load_credentials(path: str) -> Credentials:
    """Read a credentials file; InvalidConfigurationError names the file and line of anything wrong in it."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigurationError(f"cannot read the SASL credentials file {path}: {_reason(exc)}") from None
    credentials = Credentials()
    seen: dict[tuple[str, str], int] = {}
    for number, line in enumerate(lines, 1):
        try:
            entry = parse_line(line)
            if entry is None:
                continue
            user, mechanism, value = entry
            if (user, mechanism) in seen:
                raise ValueError(
                    f"a second {mechanism} entry for user {user} (the first is on line {seen[user, mechanism]})"
                )
            seen[(user, mechanism)] = number
            if mechanism == PLAIN:
                credentials.add_plain(user, value)
            else:
                credentials.add_scram(user, mechanism, parse_scram(value))
        except ValueError as exc:
            raise InvalidConfigurationError(f"{path} line {number}: {exc}") from None
    return credentials


def parse_line(line: str) -> tuple[str, str, str] | None:
    """(user, mechanism, value) of a credentials line, None for a blank or comment line; ValueError if malformed."""
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    parts = line.split(" ", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(
            "expected USER MECHANISM VALUE (e.g. 'alice SCRAM-SHA-256 salt=...' or 'bob PLAIN password=...')"
        )
    user, mechanism, value = parts
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    if mechanism == PLAIN:
        if not value.startswith("password="):
            raise ValueError("a PLAIN entry is 'USER PLAIN password=PASSWORD'")
        # Never echo the value: an error message must not carry a password.
        if not value.removeprefix("password="):
            raise ValueError("the PLAIN password is empty")
        return user, mechanism, value.removeprefix("password=")
    return user, mechanism, value.strip()


def parse_scram(text: str) -> ScramCredential:
    """Kafka's `salt=...,stored_key=...,server_key=...,iterations=N`; ValueError if it is not one."""
    fields = dict(item.partition("=")[::2] for item in text.split(","))
    missing = [name for name in ("salt", "stored_key", "server_key", "iterations") if not fields.get(name)]
    if missing:
        raise ValueError(f"the SCRAM credential lacks {', '.join(missing)}")
    try:
        iterations = int(fields["iterations"])
        salt, stored_key, server_key = (
            base64.b64decode(fields[k], validate=True) for k in ("salt", "stored_key", "server_key")
        )
    except (ValueError, binascii.Error):
        raise ValueError("the SCRAM credential's values are not base64 and an integer iteration count") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations={iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's SCRAM bounds)"
        )
    return ScramCredential(salt, stored_key, server_key, iterations)


def add_scram_user(
    path: str,
    user: str,
    password: str,
    *,
    iterations: int = MIN_ITERATIONS,
    mechanisms: Iterable[str] = tuple(SCRAM_HASHES),
) -> None:
    """Write `user`'s SCRAM lines into the file (created if missing), replacing the user's earlier ones.

    The file is replaced atomically (a partial write never leaves the server unable to read it),
    and a new file is readable by its owner only.
    """
    if not user or any(c.isspace() for c in user):
        raise IllegalUserNameError(
            f"user name {user!r} is empty or has a space (the credentials file separates fields with spaces)"
        )
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidConfigurationError(f"iterations {iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    mechanisms = tuple(mechanisms)
    try:
        with open(path, encoding="utf-8") as f:
            kept = [line for line in f.read().splitlines() if not _is_entry_of(line, user, mechanisms)]
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        kept, mode = [], 0o600
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigurationError(f"cannot read the SASL credentials file {path}: {_reason(exc)}") from None
    lines = kept + [f"{user} {m} {scram_credential(m, password, iterations=iterations).to_text()}" for m in mechanisms]
    _write_atomically(path, "".join(line + "\n" for line in lines), mode)


class IllegalUserNameError(InvalidConfigurationError):
    """A user name the credentials file cannot hold."""


def _is_entry_of(line: str, user: str, mechanisms: tuple[str, ...]) -> bool:
    parts = line.split(" ", 2)
    return len(parts) == 3 and parts[0] == user and parts[1] in mechanisms


def _write_atomically(path: str, text: str, mode: int) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".credentials-")
    except OSError as exc:
        raise InvalidConfigurationError(f"cannot write the SASL credentials file {path}: {_reason(exc)}") from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """What a SASL listener accepts: the users, and the mechanisms enabled (Kafka's sasl.enabled.mechanisms)."""

    credentials: Credentials
    mechanisms: tuple[str, ...] = MECHANISMS
