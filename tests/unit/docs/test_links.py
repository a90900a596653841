"""Every relative link in the README, docs/ (notes/ too), bench/README.md and CHANGELOG.md
resolves: the file exists, and a `#fragment` names a heading of the target (GitHub's
anchors). Files keep moving between these documents; a link left pointing at the old place
fails here."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = sorted(
    p
    for p in [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "bench" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
    if p.exists()
)
_md = MarkdownIt("commonmark").enable("table")


def _tokens(text: str):  # type: ignore[no-untyped-def]
    for token in _md.parse(text):
        yield token
        yield from token.children or ()


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    tokens = _md.parse(text)
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        inline = tokens[i + 1]
        plain = "".join(
            c.content for c in inline.children or () if c.type in ("text", "code_inline")
        )
        slug = github_anchor(plain)
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def relative_links(text: str) -> list[str]:
    hrefs = [
        t.attrs.get("href") or t.attrs.get("src")
        for t in _tokens(text)
        if t.type in ("link_open", "image")
    ]
    return [
        str(h)
        for h in hrefs
        if h and not urlsplit(str(h)).scheme and not str(h).startswith("mailto:")
    ]


def broken_links(document: Path) -> list[str]:
    problems = []
    text = document.read_text()
    for href in relative_links(text):
        parts = urlsplit(href)
        target = (document.parent / unquote(parts.path)).resolve() if parts.path else document
        if not target.exists():
            problems.append(f"{href}: no such file {target}")
        elif (
            parts.fragment
            and target.suffix == ".md"
            and parts.fragment not in anchors(target.read_text())
        ):
            problems.append(f"{href}: no heading #{parts.fragment} in {target.name}")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert broken_links(document) == []


def test_every_document_under_docs_is_checked_and_reached_from_the_index() -> None:
    """docs/ at any depth (the dated notes in docs/notes/ too), and each of its documents
    linked from docs/README.md, the reading path and the reference list."""
    under_docs = {p for p in DOCUMENTS if (ROOT / "docs") in p.parents}
    assert under_docs == set((ROOT / "docs").rglob("*.md"))
    assert any(p.parent.name == "notes" for p in under_docs)
    index = ROOT / "docs" / "README.md"
    reached = {
        (index.parent / urlsplit(h).path).resolve()
        for h in relative_links(index.read_text())
        if urlsplit(h).path
    }
    missing = sorted(str(p.relative_to(ROOT)) for p in under_docs - {index} - reached)
    assert missing == []


def test_the_checker_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text(
        "# A `code` heading, with: punctuation\n\n## Twice\n## Twice\n"
    )
    doc = tmp_path / "here.md"
    doc.write_text(
        "[ok](there.md#a-code-heading-with-punctuation) [second](there.md#twice-1) "
        "[web](https://example.com/x) [gone](missing.md) [bad](there.md#nowhere)\n\n"
        "| a | b |\n|---|---|\n| [in a table](gone/too.md) | x |\n\n"
        "```\n[not a link](in-code.md)\n```\n"
    )
    problems = broken_links(doc)
    assert [p.split(":")[0] for p in problems] == ["missing.md", "there.md#nowhere", "gone/too.md"]


def test_the_documents_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in DOCUMENTS}
    assert {"README.md", "bench/README.md", "docs/contract.md"} <= names
