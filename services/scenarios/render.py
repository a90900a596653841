"""What `passk scenarios` prints, with rich: the problems and warnings of a set, the
scenarios validated, published or on the topic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from services.clikit import console
from services.grading.scenario_loader import FILE_LEVEL, LoadResult, ScenarioError

if TYPE_CHECKING:
    from services.contract.scenario_records import CatalogState
    from services.scenarios.publish import Published


def problems_table(title: str, problems: list[ScenarioError], style: str) -> Table:
    table = Table(title=title, title_style=style, show_lines=False)
    table.add_column("file", no_wrap=True)
    table.add_column("line", justify="right")
    table.add_column("field", no_wrap=True)
    table.add_column("problem")
    for p in problems:
        field = p.field if p.field != FILE_LEVEL else "—"
        table.add_row(p.file, str(p.line or ""), field, p.problem)
    return table


def report_validation(result: LoadResult, outcome: str) -> None:
    if result.warnings:
        console(stderr=True).print(
            problems_table(f"{len(result.warnings)} warning(s)", list(result.warnings), "yellow")
        )
    if result.errors:
        console(stderr=True).print(
            problems_table(f"{len(result.errors)} problem(s): {outcome}", result.errors, "red")
        )
        if result.scenarios:
            # A set is all or nothing (DESIGN.md); say which files were fine, so the user
            # can fix the others or publish these alone.
            valid = ", ".join(sorted(result.sources.values()))
            console(stderr=True).print(
                f"{len(result.scenarios)} valid file(s), held back with the set: {valid}",
                soft_wrap=True,
                markup=False,
            )


def print_published(steps: Sequence[Published], result: LoadResult) -> None:
    table = Table("id", "version", "k", "judges", "expectations", "status", "file")
    for step in steps:
        s = step.scenario
        status: str = step.status
        if step.status == "updated":
            status = f"updated (was {step.previous_version})"
        table.add_row(
            s.id,
            s.version or "",
            str(s.k),
            str(len(s.judges)),
            str(len(s.outcome)),
            status,
            result.sources.get(s.id, ""),
        )
    console().print(table)


def print_validated(result: LoadResult) -> None:
    table = Table("id", "version", "k", "judges", "expectations", "file")
    for s in result.scenarios:
        table.add_row(
            s.id,
            s.version or "",
            str(s.k),
            str(len(s.judges)),
            str(len(s.outcome)),
            result.sources.get(s.id, ""),
        )
    console().print(table)


def print_catalog(state: CatalogState) -> None:
    table = Table("id", "version", "k", "exits", "judges", "expectations", "versions seen")
    for scenario_id, s in sorted(state.latest().items()):
        table.add_row(
            scenario_id,
            s.version or "",
            str(s.k),
            ", ".join(s.expected_exit),
            str(len(s.judges)),
            str(len(s.outcome)),
            str(len(state.versions(scenario_id))),
        )
    console().print(table)
