"""`passk calibrate` and `passk label`: options, then `labelled` (the sets graded, the
calibrations recorded, a label published), then `render`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape

from services.clikit import BROKER_WAIT

if TYPE_CHECKING:
    from services.contract.settings import Settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.

EXIT_USAGE = 2


def _err(message: str, code: int) -> typer.Exit:
    from services.calibration.render import error

    error(message)
    return typer.Exit(code)


def register(app: typer.Typer, *, judge_grader: Callable[[Settings], tuple[Any, str]]) -> None:
    """`judge_grader(settings)`: the production judge path and its prompt hash (the judge
    processor's, handed over by the CLI: services/cli/wiring.py)."""

    @app.command()
    def calibrate(
        directory: Path = typer.Argument(None, help="labelled sets: <judge_id>.jsonl files"),
        judge: str = typer.Option(None, "--judge", help="only this judge's set"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        scenarios: Path = typer.Option(
            None,
            help="where the judges are defined (default: DIR/../scenarios, else the "
            "published scenarios)",
        ),
        history: str = typer.Option(
            None, "--history", help="show JUDGE_ID's calibrations over time instead"
        ),
        export: Path = typer.Option(
            None,
            "--export",
            help="write the sets grown by production labels into this directory instead",
        ),
        publish: bool = typer.Option(True, help="publish to judge-calibrations.v1 and store"),
        wait: float | None = BROKER_WAIT,
    ) -> None:
        """Run each judge over its labelled set through the production judge path: confusion
        matrix, precision, recall, and whether it may fail trials (gating) or is advisory."""
        from services.calibration.labelled import CalibrationError
        from services.calibration.sets import load_sets
        from services.contract.settings import get_settings

        settings = get_settings()
        try:
            if history:
                return _history(history, settings, as_json)
            if export:
                return _export(export, settings)
            if directory is None:
                raise _err(
                    "give a directory of labelled sets (or --history ID, --export DIR)", EXIT_USAGE
                )
            sets, problems = load_sets(directory, judge)
            if problems and not sets:
                _problems(problems, "red")
                raise typer.Exit(EXIT_USAGE)
            _calibrate(
                sets,
                problems,
                directory,
                scenarios,
                settings,
                publish=publish,
                wait=wait,
                judge_grader=judge_grader,
                as_json=as_json,
            )
        except CalibrationError as exc:
            raise _err(exc.message, int(exc.code)) from None

    app.command()(label)


def _calibrate(
    sets: Any,
    problems: list[Any],
    directory: Path,
    scenarios: Path | None,
    settings: Settings,
    *,
    publish: bool,
    wait: float | None,
    judge_grader: Callable[[Settings], tuple[Any, str]],
    as_json: bool,
) -> None:
    from services.calibration.calibrate import by_dimension, calibrate_json
    from services.calibration.labelled import grade_sets, record_calibrations
    from services.calibration.render import print_results

    graded = grade_sets(
        sets,
        directory,
        scenarios,
        settings,
        publish=publish,
        wait=wait,
        judge_grader=judge_grader,
        note=lambda told: Console(stderr=True).print(told, soft_wrap=True, markup=False),
    )
    problems += graded.problems
    _problems(problems, "yellow")
    if publish and graded.results:
        record_calibrations(settings, graded.results)
    if as_json:
        typer.echo(json.dumps(calibrate_json(graded.results)))
    else:
        print_results(
            graded.results,
            by_dimension(graded.results, graded.bar),
            graded.bar,
            Console(width=None if sys.stdout.isatty() else 200),
        )
    if problems:
        raise typer.Exit(EXIT_USAGE)


def _problems(problems: list[Any], colour: str) -> None:
    from services.calibration.render import print_problems

    print_problems(problems, colour)


def _history(judge_id: str, settings: Settings, as_json: bool) -> None:
    from services.calibration.labelled import calibration_history
    from services.calibration.render import print_history

    rows = calibration_history(judge_id, settings)
    if as_json:
        typer.echo(
            json.dumps({"judge_id": judge_id, "history": [r.model_dump(mode="json") for r in rows]})
        )
        return
    print_history(judge_id, rows, Console())


def _export(folder: Path, settings: Settings) -> None:
    from services.calibration.labelled import export_labelled

    for path, added in export_labelled(folder, settings).items():
        Console(stderr=True).print(f"{path}: {added} item(s) added")


def label(
    trial_id: str = typer.Argument(..., help="the graded trial"),
    judge: str = typer.Option(..., "--judge", help="the judge whose verdict is labelled"),
    passed: bool = typer.Option(
        None, "--pass/--fail", help="does the judge's assertion hold for this trial?"
    ),
    note: str = typer.Option(None, "--note", help="why, in a few words"),
    wait: float | None = BROKER_WAIT,
) -> None:
    """Label one judge's verdict on one trial (a production miss goes back into its set)."""
    from services.calibration.labelled import CalibrationError, publish_label
    from services.contract.settings import get_settings

    if passed is None:
        raise _err("say --pass or --fail", EXIT_USAGE)
    settings = get_settings()
    try:
        publish_label(trial_id, judge, passed, note, settings, wait)
    except CalibrationError as exc:
        raise _err(exc.message, int(exc.code)) from None
    Console(stderr=True).print(
        f"labelled {escape(trial_id)} for {escape(judge)}: {'pass' if passed else 'fail'}",
        soft_wrap=True,
    )
