"""Regular expressions written in scenarios (`matches` expectations, `regex` judges) run on
RE2 (google-re2): matching takes time linear in the text, whatever the pattern, so a
pattern like `(a+)+$` cannot freeze a worker by backtracking. RE2 refuses what it cannot
run in linear time (backreferences, lookaround); validation reports that when a scenario
is checked, before anything is published.

Differences from Python's `re` a pattern author may meet: no backreferences or
lookaround, and `$` matches only at the very end of the text unless `(?m)` is given.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

# Bounds the memory one compiled pattern may use; beyond it RE2 refuses to compile the
# pattern (at validation) rather than grow without limit.
MAX_PATTERN_MEMORY = 32 << 20


class PatternError(ValueError):
    """The pattern cannot be run by the linear-time engine; `reason` is RE2's own word."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False  # the error is raised to the caller; no stray stderr
    return options


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Any:
    """The compiled pattern (cached), or PatternError saying why RE2 cannot run it."""
    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        reason = _text(exc)
        raise PatternError(
            f"/{pattern}/ is not a valid regular expression for RE2, the linear-time "
            f"engine passk uses: {reason}",
            reason,
        ) from exc


def _text(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
