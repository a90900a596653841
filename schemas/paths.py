"""The path syntax of outcome expectations, part of the contract (DESIGN.md, "Scenario file").

A path names a place in a persisted session state: dotted keys, list items by index as
`a.b[0].c` or `a.b.0.c`. The scenario model validates paths with `parse_path`; the gate
reads states with `resolve`; the traffic generator writes states along the same steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]|(\.)")


class PathError(ValueError):
    """The path text itself is malformed (empty segment, unclosed bracket...)."""


@dataclass(frozen=True)
class Lookup:
    """What a path resolved to: `found` False when some step does not exist."""

    found: bool
    value: Any = None


def parse_path(path: str) -> list[str | int]:
    """`a.b[0].c` and `a.b.0.c` -> ['a', 'b', 0, 'c'] / ['a', 'b', '0', 'c'].

    A bracketed index is always a list index; a bare numeric segment is a list index
    when the value there is a list and a key otherwise (JSON object keys may be digits).
    """
    steps: list[str | int] = []
    pos = 0
    expect_segment = True
    for m in _SEGMENT.finditer(path):
        if m.start() != pos:
            break
        pos = m.end()
        name, index, dot = m.groups()
        if dot:
            if expect_segment:
                raise PathError(f"empty segment in path {path!r}")
            expect_segment = True
        elif index is not None:
            if not steps:
                raise PathError(f"path {path!r} starts with an index")
            steps.append(int(index))
            expect_segment = False
        else:
            if not expect_segment:
                raise PathError(f"missing '.' before {name!r} in path {path!r}")
            steps.append(name)
            expect_segment = False
    if pos != len(path):
        raise PathError(f"cannot read path {path!r} at character {pos + 1}")
    if expect_segment:
        raise PathError(f"path {path!r} is empty or ends with '.'")
    return steps


def resolve(state: Any, path: str) -> Lookup:
    value = state
    for step in parse_path(path):
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return Lookup(False)
            value = value[step]
        elif isinstance(value, dict):
            if step not in value:
                return Lookup(False)
            value = value[step]
        elif isinstance(value, list) and step.isdigit():
            if int(step) >= len(value):
                return Lookup(False)
            value = value[int(step)]
        else:
            return Lookup(False)
    return Lookup(True, value)
