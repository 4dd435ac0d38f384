"""API tokens: a file of names, roles and SHA-256 hashes; a token itself is shown once.

``fabricjobs token create NAME --role ROLE`` prints a new random token and stores only its
hash, so the file (created 0600) gives nobody a way in. A token is 256 random bits, so a
plain SHA-256 is enough (a slow password hash guards guessable secrets) and looking its hash
up in a dict reveals nothing: its timing depends on the hash, which a caller cannot steer.
The web process reads the file again whenever it changed, so a revocation holds from the next
request, in every process, with nothing to restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Iterator

from ..errors import ConfigError
from ..private import tighten_if_present

PREFIX = "fjt_"  # says what a leaked string is (secret scanners match on it)
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


class Role(StrEnum):
    """viewer: reads; operator: also changes jobs and kills tasks; admin: everything."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


@dataclass(frozen=True)
class TokenInfo:
    """One token as the file keeps it: never the token, only its hash."""

    name: str
    role: Role
    sha256: str
    created: str  # ISO 8601 UTC


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenFile:
    """The tokens file: created and changed by the CLI, read (and re-read) by the web process."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of what _by_hash holds
        self._by_hash: dict[str, TokenInfo] = {}

    # -- the CLI's side -------------------------------------------------------------------------

    def create(self, name: str, role: Role) -> str:
        """A new token for ``name`` (refused if the name is taken); returns the token itself."""
        if not _NAME.fullmatch(name):
            raise ConfigError(f"a token name may use letters, digits and _ . @ - (1 to 64 of them), got {name!r}")
        token = PREFIX + secrets.token_urlsafe(32)
        with self._editing() as tokens:
            if any(t.name == name for t in tokens):
                raise ConfigError(f"a token named {name!r} exists already (revoke it first)")
            created = datetime.now(timezone.utc).isoformat(timespec="seconds")
            tokens.append(TokenInfo(name, Role(role), digest(token), created))
        return token

    def revoke(self, name: str) -> bool:
        """Forget the token named ``name``; whether there was one."""
        with self._editing() as tokens:
            kept = [t for t in tokens if t.name != name]
            found = len(kept) != len(tokens)
            tokens[:] = kept
        return found

    def entries(self) -> list[TokenInfo]:
        return self._read() if self.path.exists() else []

    @contextmanager
    def _editing(self) -> Iterator[list[TokenInfo]]:
        """The tokens, to change in place; written back atomically (a new 0600 file renamed over
        the old one) under an exclusive lock, so that two CLIs at once lose no token."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            tokens = self.entries()
            yield tokens
            self._write(tokens)

    def _write(self, tokens: list[TokenInfo]) -> None:
        body = json.dumps({"version": 1, "tokens": [asdict(t) for t in tokens]}, indent=2) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise

    def _read(self) -> list[TokenInfo]:
        tighten_if_present(self.path)  # (hashes only, but a 0644 copy is still not everyone's)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [TokenInfo(t["name"], Role(t["role"]), t["sha256"], t.get("created", "")) for t in data["tokens"]]
        except OSError as exc:
            raise ConfigError(f"cannot read the tokens file {str(self.path)!r}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"the tokens file {str(self.path)!r} is damaged ({exc!r}); "
                              "remove it and create the tokens again") from None

    # -- the web process's side -----------------------------------------------------------------

    def find(self, token: str) -> TokenInfo | None:
        """The token's entry, or None (unknown or revoked)."""
        with self._lock:
            self._refresh()
            return self._by_hash.get(digest(token))

    def named(self, name: str) -> TokenInfo | None:
        """The entry named ``name`` (a console session names its token), or None."""
        with self._lock:
            self._refresh()
            return next((t for t in self._by_hash.values() if t.name == name), None)

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._by_hash = None, {}
            return
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen != self._seen:
            self._by_hash = {t.sha256: t for t in self._read()}
            self._seen = seen
