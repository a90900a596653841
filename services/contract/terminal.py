"""Text from events made safe for a terminal: every command that prints what a producer, a
model or a product wrote (a transcript, a reason, a state value, an id) passes it through
`literal` first.

- Terminal control characters are shown, not obeyed: an ESC in a transcript could set the
  window title, recolour or clear the screen, or forge a line of output. Every C0 and C1
  control (but newline and tab), DEL, and the bidirectional overrides and isolates (which
  reorder what a reader sees, "Trojan Source") are written as `\\xNN` / `\\uNNNN`.
- Rich markup is printed as written: `[bold]` in a transcript stays `[bold]` (the same
  escaping as rich.markup.escape, kept here so this layer imports no output library).
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MARKUP = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every terminal control character written out visibly."""
    return _CONTROL.sub(_shown, text)


def literal(text: str) -> str:
    """`printable(text)`, its rich markup escaped: printed by rich exactly as written."""
    out = _MARKUP.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", printable(text))
    if out.endswith("\\") and not out.endswith("\\\\"):
        out += "\\"
    return out
