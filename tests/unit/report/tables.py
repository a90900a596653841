"""Reading the tables of a report page back as a browser would: each row's attributes and
its cells' text, and each cell's `data-figure` name."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[str] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)  # data-figure -> the cell's text


@dataclass
class Table:
    attrs: dict[str, str]
    headers: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self._open: list[Table] = []  # tables being read (nested ones too)
        self._cell: list[str] | None = None
        self._figure: str | None = None
        self._header = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {k: v or "" for k, v in attrs}
        if tag == "table":
            self._open.append(Table(named))
            self.tables.append(self._open[-1])
        elif tag == "tr" and self._open:
            self._open[-1].rows.append(Row(named))
        elif tag in ("td", "th") and self._open:
            self._cell, self._figure, self._header = [], named.get("data-figure"), tag == "th"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._open and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            table = self._open[-1]
            if self._header:
                table.headers.append(text)
            elif table.rows:
                table.rows[-1].cells.append(text)
                if self._figure:
                    table.rows[-1].figures[self._figure] = text
            self._cell = None
        elif tag == "table" and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(page: str) -> list[Table]:
    """Every table of the page, in page order; a header row holds no cells."""
    parser = _Tables()
    parser.feed(page)
    for t in parser.tables:
        t.rows = [r for r in t.rows if r.cells]
    return parser.tables


def table(page: str, **attrs: str) -> Table:
    """The one table whose attributes include `attrs` (`id="invalid-trials"`, say)."""
    found = [t for t in tables(page) if all(t.attrs.get(k) == v for k, v in attrs.items())]
    assert len(found) == 1, f"{len(found)} tables with {attrs}"
    return found[0]
