"""`passk scenarios publish|validate|list`: options, then `validate_paths` or `publish`
(publish_set, published_catalog), then `render`."""

from __future__ import annotations

from pathlib import Path

import typer

from services.clikit import BROKER_WAIT
from services.contract.exits import ExitCode
from services.grading.scenario_loader import LoadResult, validate_paths

# Imports inside functions here are deferred: every command module loads on each `passk` run.

EXIT_INVALID = ExitCode.USAGE


def _validated(paths: list[Path], outcome: str) -> LoadResult:
    """The set, its problems and warnings printed; exit 2 on any problem."""
    from services.scenarios.render import report_validation

    result = validate_paths(paths)
    report_validation(result, outcome)
    if result.errors:
        raise typer.Exit(EXIT_INVALID)
    return result


def publish(
    paths: list[Path] = typer.Argument(..., help="scenario files or directories of *.yaml"),
    wait: float | None = BROKER_WAIT,
) -> None:
    """Validate every file, then publish them all; any problem publishes nothing (exit 2;
    exit 4 when the broker does not answer)."""
    from services.contract.settings import get_settings
    from services.scenarios.publish import publish_set
    from services.scenarios.render import print_published

    result = _validated(paths, "nothing was published")
    print_published(publish_set(result.scenarios, get_settings(), wait), result)


def validate(
    paths: list[Path] = typer.Argument(..., help="scenario files or directories of *.yaml"),
) -> None:
    """Check scenario files without publishing (exit 2 on any problem)."""
    from services.scenarios.render import print_validated

    print_validated(_validated(paths, "invalid"))


def list_(wait: float | None = BROKER_WAIT) -> None:
    """The latest published version of every scenario on the scenarios topic."""
    from services.contract.settings import get_settings
    from services.scenarios.publish import published_catalog
    from services.scenarios.render import print_catalog

    print_catalog(published_catalog(get_settings(), wait))


def register(app: typer.Typer) -> None:
    scenarios = typer.Typer(
        help="Scenario definitions (YAML) and the scenarios topic.", no_args_is_help=True
    )
    scenarios.command("publish")(publish)
    scenarios.command("validate")(validate)
    scenarios.command("list")(list_)
    app.add_typer(scenarios, name="scenarios")
