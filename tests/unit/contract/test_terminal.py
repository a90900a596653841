"""Text from events printed by rich: controls shown, markup printed as written."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.markup import escape as rich_escape

from services.contract.terminal import literal, printable

HOSTILE = [
    "\x1b]0;owned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b[31mred\x1b[0m",
    "ok\rFORGED LINE",  # a carriage return that overwrites what was printed
    "\u202eevil\u202c",  # right-to-left override
    "\x9b31m",  # C1 CSI
    "del\x7f",
]


def rendered(markup: str, *, terminal: bool) -> str:
    out = io.StringIO()
    Console(
        file=out, force_terminal=terminal, width=200, color_system="standard" if terminal else None
    ).print(markup, soft_wrap=True)
    return out.getvalue()


@pytest.mark.parametrize("text", HOSTILE)
def test_no_control_character_reaches_the_terminal(text: str) -> None:
    shown = rendered(literal(text), terminal=False)
    assert not any(ch in shown for ch in "\x1b\x07\r\x7f\x9b\u202e\u202c")


def test_controls_are_written_out() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\u202e") == "\\u202e"
    assert printable("line one\nline\ttwo") == "line one\nline\ttwo"  # kept


@pytest.mark.parametrize(
    "text",
    ["[bold]not bold[/bold]", "[red]x", "a\\[b]", "[link=http://x]y[/link]", "[/]", "plain [1, 2]"],
)
def test_markup_is_printed_as_written(text: str) -> None:
    assert literal(text) == rich_escape(text)  # the same escaping as rich's own
    assert rendered(literal(text), terminal=False).rstrip("\n") == text


def test_a_trailing_backslash_cannot_escape_the_markup_after_it() -> None:
    assert literal("ends\\") == rich_escape("ends\\")
    assert rendered(f"[bold]{literal('x' + chr(92))}[/bold]", terminal=False).startswith("x")
