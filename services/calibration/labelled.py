"""`passk calibrate`'s and `passk label`'s work, as functions returning values: the
labelled sets graded through the production judge path, the calibrations published and
stored, a judge's history, the sets grown by production labels, a label published."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.contract.exits import CliError, ExitCode

if TYPE_CHECKING:
    from schemas.events import JudgeCalibration
    from schemas.scenario import Scenario
    from services.calibration.calibrate import JudgeCalibrationResult
    from services.calibration.sets import LabelledSet, SetProblem
    from services.calibration.store import CalibrationRow
    from services.contract.settings import Settings
    from services.grading.calibration import Bar


class CalibrationError(CliError):
    """What stops `passk calibrate` or `passk label`: printed by the command as
    `error: <message>` (in red on a terminal), exit `code`."""


@dataclass
class Graded:
    results: list[JudgeCalibrationResult]
    bar: Bar
    problems: list[SetProblem] = field(default_factory=list)  # found while grading


def grade_sets(
    sets: Sequence[LabelledSet],
    directory: Path,
    scenarios_dir: Path | None,
    settings: Settings,
    *,
    publish: bool,
    wait: float | None,
    judge_grader: Callable[[Settings], tuple[Any, str]],
    note: Callable[[str], None],
) -> Graded:
    """Each judge of the scenarios over its labelled set, through `judge_grader`'s judge
    (the production path, with the endpoint `make up` gave the workers when no OPENAI_*
    is set here; `note` says so). With `publish`, the broker is reached first: the
    results would have nowhere to go."""
    from services.calibration.calibrate import plan_judges, run
    from services.contract.runfiles import NoJudge, cli_judge
    from services.grading.calibration import Bar
    from services.kafka.reach import require_broker

    if publish:  # before any judge is asked: the results would have nowhere to go
        require_broker(wait, settings)
    bar = Bar(settings.calibration_bar, settings.min_labelled)
    plan = plan_judges(scenarios_for(directory, scenarios_dir, settings))
    try:  # with no OPENAI_* here: the endpoint `make up` gave the workers
        judge_settings, told = cli_judge(settings)
    except NoJudge as exc:
        raise CalibrationError(
            str(exc), ExitCode.UNREACHABLE if exc.unreachable else ExitCode.USAGE
        ) from None
    if told:
        note(told)
    grader, prompt_hash = judge_grader(judge_settings)
    results, problems = asyncio.run(
        run(
            sets,
            plan,
            grader,
            bar=bar,
            prompt_hash=prompt_hash,
            transcript_of=transcripts_of(settings),
        )
    )
    return Graded(results, bar, problems)


def record_calibrations(settings: Settings, results: Sequence[JudgeCalibrationResult]) -> None:
    """The calibrations published to judge-calibrations.v1, then stored."""
    from sqlalchemy.exc import OperationalError

    from services.calibration.store import CalibrationStore

    calibrations = [r.calibration for r in results]
    try:
        publish_calibrations(settings, calibrations)
    except Exception as exc:
        raise CalibrationError(
            f"cannot publish to the broker at {settings.kafka_bootstrap_servers}: {exc}",
            ExitCode.UNREACHABLE,
        ) from exc
    store = CalibrationStore(settings.database_url)
    try:
        for c in calibrations:
            store.record_calibration(c)
    except OperationalError as exc:
        raise CalibrationError(
            f"cannot write the store at {store.url}: {exc.orig or exc}", ExitCode.UNREACHABLE
        ) from exc
    finally:
        store.close()


def calibration_history(judge_id: str, settings: Settings) -> list[CalibrationRow]:
    """The judge's calibrations in the store, oldest first; exit 3 when there is none."""
    from sqlalchemy.exc import OperationalError

    from services.calibration.store import CalibrationStore

    store = CalibrationStore(settings.database_url)
    try:
        rows = store.history(judge_id)
    except OperationalError as exc:
        raise CalibrationError(
            f"cannot read the store at {store.url}: {exc.orig or exc}", ExitCode.UNREACHABLE
        ) from exc
    finally:
        store.close()
    if not rows:
        raise CalibrationError(
            f"no calibration of judge {judge_id!r} in the store", ExitCode.NOTHING_TO_JUDGE
        )
    return rows


def export_labelled(folder: Path, settings: Settings) -> dict[Path, int]:
    """The sets grown by production labels, written into `folder`: items added per file."""
    from services.calibration.export import export_sets
    from services.calibration.store import CalibrationStore

    store = CalibrationStore(settings.database_url)
    try:
        return export_sets(store.items(), folder, transcripts_of(settings))
    finally:
        store.close()


def publish_label(
    trial_id: str,
    judge: str,
    passed: bool,
    note: str | None,
    settings: Settings,
    wait: float | None,
) -> None:
    """One person's label of a judge's verdict on a trial, published."""
    import getpass

    from services.kafka.labels import label_event, publish_labels
    from services.kafka.reach import require_broker

    require_broker(wait, settings)
    event = label_event(trial_id, judge, passed, note, getpass.getuser())
    try:
        publish_labels(settings, [event])
    except Exception as exc:
        raise CalibrationError(
            f"cannot publish the label to {settings.kafka_bootstrap_servers}: {exc}",
            ExitCode.UNREACHABLE,
        ) from exc


def scenarios_for(sets_dir: Path, scenarios_dir: Path | None, settings: Settings) -> list[Scenario]:
    """The scenarios defining the judges: `scenarios_dir`, else DIR/../scenarios beside the
    sets, else the published ones."""
    from services.grading.scenario_loader import load_scenarios
    from services.kafka.catalog import CatalogUnavailable, load_catalog

    folder = scenarios_dir or (sets_dir.parent / "scenarios")
    if folder.is_dir():
        loaded = load_scenarios(folder)
        if loaded.errors:
            raise CalibrationError(
                f"{folder}: invalid scenarios; run `passk scenarios validate {folder}`",
                ExitCode.USAGE,
            )
        return list(loaded.scenarios)
    if scenarios_dir is not None:
        raise CalibrationError(f"{scenarios_dir} is not a directory", ExitCode.USAGE)
    try:
        return list(load_catalog(settings).values())
    except CatalogUnavailable as exc:
        raise CalibrationError(
            f"no scenarios beside {sets_dir} and the published ones cannot be read: {exc}",
            ExitCode.UNREACHABLE,
        ) from exc


def transcripts_of(settings: Settings) -> Any:
    """trial id -> its transcript in the projection (None when not there)."""
    from schemas.events import Message
    from services.storage.store import Store

    def lookup(trial_id: str) -> list[Message] | None:
        store = Store(settings.database_url)
        try:
            found = store.transcript(trial_id)
        finally:
            store.close()
        if found is None:
            return None
        return [Message.model_validate(m) for m in found.messages]

    return lookup


def publish_calibrations(settings: Settings, calibrations: list[JudgeCalibration]) -> None:
    from services.contract.codec import encode
    from services.contract.topics import Topic
    from services.kafka.send import send_all

    send_all(settings, Topic.JUDGE_CALIBRATIONS, [(c.judge_id, encode(c)) for c in calibrations])
