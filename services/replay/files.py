"""`passk generate`'s work: synthetic traffic for a set of scenarios, written to its two
files (the events, the expected outcomes)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from schemas.scenario import Scenario
from services.replay.generate import GenerateConfig, Traffic, generate, generate_ending_by


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def generate_traffic(
    scenarios: Sequence[Scenario],
    config: GenerateConfig,
    *,
    ends_now: bool,
    out: Path,
    expected: Path,
) -> Traffic:
    """The run's traffic, written to `out` and its expected outcomes to `expected`.
    `ends_now`: the run ends now, so replaying it sends no event dated ahead of the clock
    (no --start); else the times start at `config.started_at`, as given. GenerateError
    when the scenarios cannot make the traffic asked for (nothing written)."""
    traffic = (
        generate_ending_by(scenarios, config, datetime.now(UTC))
        if ends_now
        else generate(scenarios, config)
    )
    write_atomically(out, traffic.jsonl())
    write_atomically(expected, traffic.expected_json())
    return traffic
