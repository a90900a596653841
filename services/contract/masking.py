"""Secrets out of everything passk writes: configuration files, logs, error lines.

One masker for every place (var/run/env written by `make up`, `passk report`'s store line,
error messages), so every way of writing a password into a URL is masked the same:
`user:pw@`, an empty user (`:pw@`), a percent-encoded password, any scheme
(`postgresql+psycopg://`), and query parameters (`?password=`, `?sslpassword=`, a
percent-encoded key such as `pass%77ord`). A URL that cannot be parsed is not shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote_plus, urlsplit

MASK = "***"
# Query keys (after percent-decoding, lower case) whose value is a secret.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|api[_-]?key|credential|private", re.I)
# Environment variables never written down at all, whatever their value looks like.
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|CREDENTIAL|PRIVATE", re.I)
UNPARSEABLE = "(unparseable URL, not shown)"


def _mask_query(query: str) -> str:
    # `;` separates parameters as well as `&` (libpq and older HTML forms accept both).
    out = []
    for part in re.split(r"([&;])", query):
        key, eq, _ = part.partition("=")
        out.append(f"{key}={MASK}" if eq and _SECRET_KEY.search(unquote_plus(key)) else part)
    return "".join(out)


def mask_url(url: str) -> str:
    """The URL with every password in it replaced by ***; a URL that does not parse is
    replaced whole (its text might be nothing but a secret)."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return UNPARSEABLE
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else netloc
    # Put together by hand: urlunsplit drops the empty host of `sqlite:////abs/path`.
    out = f"{parts.scheme}://{netloc}{parts.path}"
    if parts.query:
        out += f"?{_mask_query(parts.query)}"
    return out + (f"#{parts.fragment}" if parts.fragment else "")


def mask_value(name: str, value: str) -> str:
    """An environment variable's value fit to write down."""
    if _SECRET_NAME.search(name):
        return "(set; not recorded)"
    return mask_url(value) if "://" in value else value


def masked_lines(environ: Mapping[str, str], names: re.Pattern[str]) -> list[str]:
    """`NAME=value` for every variable whose name matches, sorted, secrets masked."""
    return [f"{k}={mask_value(k, v)}" for k, v in sorted(environ.items()) if names.fullmatch(k)]


def mask_text(text: str) -> str:
    """Every URL inside free text (a log line, an error) masked."""
    return re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", lambda m: mask_url(m.group(0)), text)
