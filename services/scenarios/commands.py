"""`passk scenarios publish|validate|list`."""

from __future__ import annotations

from pathlib import Path

import typer
from kafka.errors import KafkaError
from rich.table import Table

from services.clikit import BROKER_WAIT
from services.clikit import console as _console
from services.contract.exits import CliError, ExitCode, Unreachable, classify
from services.grading.scenario_loader import FILE_LEVEL, LoadResult, ScenarioError, validate_paths
from services.kafka.reach import require_broker

# Imports inside functions here are deferred: every command module loads on each `passk` run.

EXIT_INVALID = ExitCode.USAGE


def _problems_table(title: str, problems: list[ScenarioError], style: str) -> Table:
    table = Table(title=title, title_style=style, show_lines=False)
    table.add_column("file", no_wrap=True)
    table.add_column("line", justify="right")
    table.add_column("field", no_wrap=True)
    table.add_column("problem")
    for p in problems:
        field = p.field if p.field != FILE_LEVEL else "—"
        table.add_row(p.file, str(p.line or ""), field, p.problem)
    return table


def _report_validation(result: LoadResult, outcome: str) -> None:
    if result.warnings:
        _console(stderr=True).print(
            _problems_table(f"{len(result.warnings)} warning(s)", list(result.warnings), "yellow")
        )
    if result.errors:
        _console(stderr=True).print(
            _problems_table(
                f"{len(result.errors)} problem(s): {outcome}", result.errors, "red"
            )
        )
        if result.scenarios:
            # A set is all or nothing (DESIGN.md); say which files were fine, so the user
            # can fix the others or publish these alone.
            valid = ", ".join(sorted(result.sources.values()))
            _console(stderr=True).print(
                f"{len(result.scenarios)} valid file(s), held back with the set: {valid}",
                soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    scenarios = typer.Typer(help="Scenario definitions (YAML) and the scenarios topic.",
                            no_args_is_help=True)

    @scenarios.command("publish")
    def publish(
        paths: list[Path] = typer.Argument(..., help="scenario files or directories of *.yaml"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Validate every file, then publish them all; any problem publishes nothing (exit 2;
        exit 4 when the broker does not answer)."""
        from services.contract.settings import get_settings
        from services.kafka.catalog import CatalogUnavailable
        from services.scenarios.publish import publish_scenarios

        result = validate_paths(paths)
        _report_validation(result, "nothing was published")
        if result.errors:
            raise typer.Exit(EXIT_INVALID)
        settings = get_settings()
        require_broker(wait, settings)
        try:
            steps = publish_scenarios(result.scenarios, settings)
        except CatalogUnavailable as exc:
            raise Unreachable(str(exc)) from exc
        except KafkaError as exc:  # the set was one transaction: none of it is readable
            code = ExitCode.UNREACHABLE if classify(exc) else ExitCode.NO
            raise CliError(f"publishing failed, nothing was published: "
                           f"{type(exc).__name__}: {exc}", code) from exc
        table = Table("id", "version", "k", "judges", "expectations", "status", "file")
        for step in steps:
            s = step.scenario
            status: str = step.status
            if step.status == "updated":
                status = f"updated (was {step.previous_version})"
            table.add_row(
                s.id, s.version or "", str(s.k), str(len(s.judges)), str(len(s.outcome)),
                status, result.sources.get(s.id, ""),
            )
        _console().print(table)

    @scenarios.command("validate")
    def validate(
        paths: list[Path] = typer.Argument(..., help="scenario files or directories of *.yaml"),
    ) -> None:
        """Check scenario files without publishing (exit 2 on any problem)."""
        result = validate_paths(paths)
        _report_validation(result, "invalid")
        if result.errors:
            raise typer.Exit(EXIT_INVALID)
        table = Table("id", "version", "k", "judges", "expectations", "file")
        for s in result.scenarios:
            table.add_row(s.id, s.version or "", str(s.k), str(len(s.judges)),
                          str(len(s.outcome)), result.sources.get(s.id, ""))
        _console().print(table)

    @scenarios.command("list")
    def list_(wait: float | None = BROKER_WAIT) -> None:
        """The latest published version of every scenario on the scenarios topic."""
        from services.contract.settings import get_settings
        from services.kafka.catalog import CatalogUnavailable, read_catalog

        settings = get_settings()
        require_broker(wait, settings)
        try:
            state = read_catalog(settings)
        except CatalogUnavailable as exc:
            raise Unreachable(str(exc)) from exc
        table = Table("id", "version", "k", "exits", "judges", "expectations", "versions seen")
        for scenario_id, s in sorted(state.latest().items()):
            table.add_row(
                scenario_id, s.version or "", str(s.k), ", ".join(s.expected_exit),
                str(len(s.judges)), str(len(s.outcome)), str(len(state.versions(scenario_id))),
            )
        _console().print(table)

    app.add_typer(scenarios, name="scenarios")
