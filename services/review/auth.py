"""Who may label: reviewers and their tokens from PASSK_REVIEW_TOKENS ("name:token,...").

`Reviewers` keeps the tokens only as salted PBKDF2 hashes and compares against them in
constant time. The plain text is not dropped from the process: it stays in the
environment it came from and in the cached settings (a pydantic SecretStr, which hides it
from repr and str); neither it nor a hash is ever logged. Sessions are signed cookies
(Starlette's SessionMiddleware); each carries a random CSRF token that every
state-changing request must echo."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

ITERATIONS = 200_000


class BadTokens(ValueError):
    """PASSK_REVIEW_TOKENS is not `name:token[,name:token...]`."""


@dataclass(frozen=True)
class Hashed:
    salt: bytes
    digest: bytes

    @classmethod
    def of(cls, token: str) -> Hashed:
        salt = os.urandom(16)
        return cls(salt, _digest(token, salt))

    def matches(self, token: str) -> bool:
        return hmac.compare_digest(self.digest, _digest(token, self.salt))

    def __repr__(self) -> str:  # never the digest either
        return "Hashed(...)"


def _digest(token: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", token.encode("utf-8"), salt, ITERATIONS)


class Reviewers:
    """The reviewers who may sign in, each with their hashed token."""

    def __init__(self, spec: str | None) -> None:
        self._hashed: dict[str, Hashed] = {}
        for part in (spec or "").split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, token = part.partition(":")
            name, token = name.strip(), token.strip()
            if not sep or not name or not token:
                # The entry itself is not echoed: it may hold a token.
                raise BadTokens(
                    "PASSK_REVIEW_TOKENS: each entry is name:token "
                    "(comma-separated), with a non-empty name and token"
                )
            if name in self._hashed:
                raise BadTokens(f"PASSK_REVIEW_TOKENS: reviewer {name!r} is named twice")
            self._hashed[name] = Hashed.of(token)
        # A dummy to compare against for unknown names: as slow as a known one.
        self._dummy = Hashed.of(secrets.token_hex(16))

    @property
    def names(self) -> list[str]:
        return sorted(self._hashed)

    def check(self, name: str, token: str) -> bool:
        hashed = self._hashed.get(name)
        ok = (hashed or self._dummy).matches(token)
        return hashed is not None and ok


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def same_csrf(expected: str | None, given: str | None) -> bool:
    return (
        bool(expected)
        and bool(given)
        and hmac.compare_digest(str(expected).encode(), str(given).encode())
    )
