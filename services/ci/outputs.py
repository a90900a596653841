"""The files `passk ci` is asked to write: JUnit XML, the pull-request comment, the report
page (services/ci/render.py and the report's page make their text)."""

from __future__ import annotations

from pathlib import Path

from services.ci.pipeline import CiResult
from services.contract.exits import UsageError
from services.contract.settings import Settings


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc


def write_outputs(
    result: CiResult,
    settings: Settings,
    *,
    junit: Path | None,
    markdown: Path | None,
    html: Path | None,
) -> list[tuple[str, Path]]:
    """Each file asked for, written; (what, where) of each, in that order. UsageError for
    a file that cannot be written."""
    from services.ci.render import junit_xml
    from services.ci.render import markdown as render_markdown

    if junit is not None:
        _write(junit, junit_xml(result))
    if markdown is not None:
        _write(markdown, render_markdown(result))
    if html is not None:
        from services.report.load import report_page

        _write(html, report_page(result.report, settings.database_url, settings))
    return [
        (name, path)
        for name, path in (("JUnit", junit), ("Markdown", markdown), ("report page", html))
        if path is not None
    ]
