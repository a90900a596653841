"""Who may label: reviewers and their tokens from PASSK_REVIEW_TOKENS ("name:token,...").

`Reviewers` keeps the tokens only as salted PBKDF2 hashes and compares against them in
constant time. The plain text is not dropped from the process: it stays in the
environment it came from and in the cached settings (a pydantic SecretStr, which hides it
from repr and str); neither it nor a hash is ever logged. Sessions are signed cookies
(Starlette's SessionMiddleware); each carries a random CSRF token that every
state-changing request must echo.

`Throttle` bounds guessing: after `LIMIT` failed sign-ins for one name within `WINDOW`
seconds, that name is refused (429) without a check until the window has passed, its
right token too."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

ITERATIONS = 200_000
MIN_TOKEN = 12  # characters: a token shorter than this is refused at the start


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
        """`spec` unset or blank: no reviewer (the sign-in page says so). Set but naming
        nobody (`" , ,"`), an entry without a name or a token, a name given twice or a
        token shorter than `MIN_TOKEN` characters: `BadTokens`, which never holds a token."""
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
            if len(token) < MIN_TOKEN:
                raise BadTokens(
                    f"PASSK_REVIEW_TOKENS: reviewer {name!r}'s token is shorter than "
                    f"{MIN_TOKEN} characters (make one with: openssl rand -hex 16)"
                )
            self._hashed[name] = Hashed.of(token)
        if spec and spec.strip() and not self._hashed:
            raise BadTokens(
                "PASSK_REVIEW_TOKENS is set but names no reviewer: give name:token[,name:token...]"
            )
        # A dummy to compare against for unknown names: as slow as a known one.
        self._dummy = Hashed.of(secrets.token_hex(16))

    @property
    def names(self) -> list[str]:
        return sorted(self._hashed)

    def check(self, name: str, token: str) -> bool:
        hashed = self._hashed.get(name)
        ok = (hashed or self._dummy).matches(token)
        return hashed is not None and ok


class Throttle:
    """Failed sign-ins per name: `limit` of them within `window` seconds lock the name out
    until the oldest of them is `window` old. While locked, an attempt is refused without a
    check and is not counted. Bounded memory: a name is kept by a fixed-size hash, with at
    most `cap` names; names whose failures are all older than the window go first, then
    the least recently failed. `clock` is monotonic seconds (tests hand in their own)."""

    LIMIT = 5
    WINDOW = 60.0
    CAP = 10_000

    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        cap: int = CAP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.cap, self.clock = limit, window, cap, clock
        self._failures: OrderedDict[bytes, deque[float]] = OrderedDict()

    @staticmethod
    def _key(name: str) -> bytes:
        return hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()

    def _recent(self, key: bytes, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def locked(self, name: str) -> float | None:
        """Seconds until `name` may try again, or None when it may now."""
        now = self.clock()
        times = self._recent(self._key(name), now)
        if times is None or len(times) < self.limit:
            return None
        return max(times[0] + self.window - now, 0.0)

    def failed(self, name: str) -> None:
        now, key = self.clock(), self._key(name)
        times = self._recent(key, now)
        if times is None:
            if len(self._failures) >= self.cap:
                self._evict(now)
            times = self._failures[key] = deque(maxlen=self.limit)
        times.append(now)
        self._failures.move_to_end(key)

    def succeeded(self, name: str) -> None:
        self._failures.pop(self._key(name), None)

    def _evict(self, now: float) -> None:
        for key in [k for k, t in self._failures.items() if t[-1] <= now - self.window]:
            del self._failures[key]
        while len(self._failures) >= self.cap:
            self._failures.popitem(last=False)  # the least recently failed

    def __len__(self) -> int:
        return len(self._failures)


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def same_csrf(expected: str | None, given: str | None) -> bool:
    return (
        bool(expected)
        and bool(given)
        and hmac.compare_digest(str(expected).encode(), str(given).encode())
    )
