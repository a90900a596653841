"""Event-time tumbling windows aligned to the epoch: pure arithmetic, no Faust.

Kept apart from the table machinery as faust's own `windows.py` does. Faust's windowed
tables are not used (docs/aggregate.md, "Why not Faust's windowed tables"): the counts
live in an ordinary changelogged table keyed by (scenario, window size, window start),
and the window a trial belongs to is computed here from its `finished_at`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class WindowSize:
    label: str  # as configured, e.g. "1h"; the `window` label of records and gauges
    seconds: int

    def start(self, at: float) -> int:
        """The start (epoch seconds) of the window holding `at`; windows are [start, end)."""
        return int(at // self.seconds) * self.seconds

    def end(self, start: int) -> int:
        return start + self.seconds


def parse_windows(spec: str) -> tuple[WindowSize, ...]:
    """ "1h,1d" -> the window sizes, in the order given; a repeated size is kept once."""
    sizes: dict[int, WindowSize] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"([1-9][0-9]*)([smhdw])", part)
        if match is None:
            raise ValueError(f"not a window size: {part!r} (a number and one of s, m, h, d, w)")
        seconds = int(match.group(1)) * UNITS[match.group(2)]
        sizes.setdefault(seconds, WindowSize(part, seconds))
    if not sizes:
        raise ValueError("no window sizes given")
    return tuple(sizes.values())


def as_datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


def rfc3339(epoch_s: float) -> str:
    return as_datetime(epoch_s).isoformat().replace("+00:00", "Z")


def scope_key(scope: str, run_id: str | None, window_start: int | None) -> str:
    """A count's scope as the aggregate's table and the audit name it between them:
    `run:<run id>` for a run, `<size label>:<epoch start>` for a window."""
    return f"run:{run_id}" if scope == "run" else f"{scope}:{window_start}"


def parse_scope(key: str) -> tuple[str, str | None, int | None]:
    """(scope, run id, window start) of a scope key: `scope` is "run" or the size label."""
    scope, _, rest = key.partition(":")
    return (scope, rest, None) if scope == "run" else (scope, None, int(rest))


def parse_duration(spec: str) -> float:
    """ "90m" -> 5400.0: a number and one of s, m, h, d, w."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*", spec)
    if match is None:
        raise ValueError(f"not a duration: {spec!r} (a number and one of s, m, h, d, w)")
    return float(match.group(1)) * UNITS[match.group(2)]
