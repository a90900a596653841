"""What one processor's command needs of another processor, handed to it here.

No processor imports another (docs/layers.md). Two commands compose two on purpose, and the
CLI, the one layer above every processor, is where that composition lives:
`main.register_commands` passes these to their modules' `register`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from services.contract.exits import UsageError
from services.contract.settings import Settings

# Imports inside functions here are deferred: every command module loads on each `passk` run.


def judge_grader(settings: Settings) -> tuple[Any, str]:
    """The production judge path and its prompt hash, for `passk calibrate`: a calibration
    measures the judge that grades."""
    from services.judge.grading import build_grader
    from services.judge.prompt import PROMPT_HASH

    return build_grader(settings, None), PROMPT_HASH


def state_probe(path: Path) -> Callable[[], Any]:
    """A harness target file's state probe, for `passk import otel --state-probe`: opens
    one probe per call. A file that is no valid target, or has no state probe, is a usage
    error naming the file."""
    from services.harness.probes import make_probe
    from services.harness.target import InvalidTarget, NoProbe, load_target

    try:
        target = load_target(path)
    except InvalidTarget as exc:
        raise UsageError(str(exc)) from None
    if isinstance(target.state, NoProbe):
        raise UsageError(f"{path}: state: the target has no state probe (kind: none)")
    spec = target.state
    return lambda: make_probe(spec)


def worker_paused(service: str, settings: Settings) -> AbstractContextManager[None]:
    """No worker of `service` runs inside the block (services/cli/pause.py)."""
    from services.cli.pause import worker_paused as paused

    return paused(service, settings)


def aggregate_table(settings: Settings, scratch: Path) -> Any:
    """The aggregate's table as its changelog holds it, copied into `scratch` (a directory
    the audit removes), read as the audit asks, for `passk audit`."""
    from services.aggregate.recount import TableView
    from services.aggregate.table import copy_table

    return TableView(copy_table(settings, scratch / "aggregate-table.db"))


def regrade_trials(settings: Settings, trials: Sequence[tuple[Any, int]], reason: str) -> int:
    """`passk regrade`'s path for `passk audit --repair`: each (identity, newest attempt)
    graded again as the next attempt; how many requests were sent."""
    from services.regrade.plan import Target
    from services.regrade.request import request_regrades

    chosen = [Target(identity, "none", attempt) for identity, attempt in trials]
    return sum(
        1 for p in request_regrades(settings, chosen, reason=reason) if p.payload is not None
    )


def recount_scenarios(settings: Settings, scenarios: set[str]) -> int:
    """`passk aggregate recount --scenario ...` for `passk audit --repair`: how many
    scopes' counts moved."""
    from services.aggregate.recounting import recount_aggregate

    return len(recount_aggregate(settings, scenarios, worker_paused).scopes)


def trial_view(settings: Settings) -> Callable[[str], Any]:
    """Trial id -> the view `passk show` builds of it (None: no such trial), for `passk
    review`'s item page: the report processor's, over the projection."""
    from services.report.load import open_trial
    from services.storage.store import Store

    store = Store(settings.database_url)
    return lambda trial_id: open_trial(store, trial_id, settings)


def publish(scenarios: Sequence[Any], settings: Settings) -> list[tuple[str, str]]:
    """`passk scenarios publish`'s, for `passk run --publish`: every new or changed
    scenario sent in one transaction; (id, new | updated | unchanged) of each."""
    from services.scenarios.publish import publish_scenarios

    return [(p.scenario.id, p.status) for p in publish_scenarios(scenarios, settings)]


# The servers that compose two processors (`passk worker NAME`): what each app's `build`
# is handed besides the settings.
WIRED_APPS: dict[str, dict[str, Callable[..., Any]]] = {
    "services.audit.app": {"read_table": aggregate_table},
    "services.otlp.app": {"state_probe": state_probe},
}
