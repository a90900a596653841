"""The table cells of the report pages (`passk report --html`, `passk windows --html`):
each cell names its figure in `data-figure`, as `--json` names it."""

from __future__ import annotations

from html import escape


def figure(value: float | None, digits: int = 3) -> str:
    """A figure as the pages show it; an undefined one (no trials to judge) as a dash."""
    return "—" if value is None else f"{value:.{digits}f}"


def cell(name: str, text: str, *, num: bool = True) -> str:
    cls = ' class="num"' if num else ""
    return f'<td data-figure="{name}"{cls}>{escape(text)}</td>'
