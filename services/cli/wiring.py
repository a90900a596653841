"""What one processor's command needs of another processor, handed to it here.

No processor imports another (docs/layers.md). Two commands compose two on purpose, and the
CLI, the one layer above every processor, is where that composition lives: `main` passes
these to their modules' `register`.
"""

from __future__ import annotations

from collections.abc import Callable
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


def publish(scenarios: list[Any], settings: Settings) -> list[tuple[str, str]]:
    """`passk scenarios publish`'s, for `passk run --publish`: every new or changed
    scenario sent in one transaction; (id, new | updated | unchanged) of each."""
    from services.scenarios.publish import publish_scenarios

    return [(p.scenario.id, p.status) for p in publish_scenarios(scenarios, settings)]


# The composed commands' modules, and what each `register` is handed.
WIRED: dict[str, dict[str, Callable[..., Any]]] = {
    "services.calibration.commands": {"judge_grader": judge_grader},
    "services.otlp.commands": {"state_probe": state_probe},
    "services.harness.commands": {"publish": publish},
}
