"""Production traffic (DESIGN.md, "Production traffic"): which scenario a trace with no
passk ids belongs to (its `match` rule), which run it counts in, and whether its LLM judges
run (the scenario's sample). Pure: shared by both doors (the OTLP receiver and `passk
import otel`), the gate, the judge, the verdict and `passk scenarios validate`.

Overlap rule: when several scenarios' matches hold, the one with the most keys wins, and
a tie goes to the smallest scenario id (plain string order), so every door, worker and
re-import picks the same scenario.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from schemas.events import ConversationFinished
from schemas.scenario import Scenario
from services.grading.sampling import in_sample

DEFAULT_RUN = "production-{date}"


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True)


def holds(match: Mapping[str, list[str]], attrs: Mapping[str, Any]) -> bool:
    """Every key of `match` is an attribute whose value is one of the allowed strings
    (a number or boolean attribute compares as it is written: 42, true)."""
    for key, allowed in match.items():
        value = _as_text(attrs.get(key))
        if value is None or value not in allowed:
            return False
    return True


def choose(scenarios: Iterable[Scenario], attrs: Mapping[str, Any]) -> Scenario | None:
    """The scenario a trace with these root attributes is a trial of, or None."""
    best: Scenario | None = None
    for s in scenarios:
        if not s.match or not holds(s.match, attrs):
            continue
        if best is None or _rank(s) < _rank(best):
            best = s
    return best


def _rank(s: Scenario) -> tuple[int, str]:
    return (-len(s.match or {}), s.id)


def can_overlap(a: Mapping[str, list[str]], b: Mapping[str, list[str]]) -> bool:
    """Some trace could satisfy both: every key they share allows a common value (a key
    only one of them names constrains nothing in the other)."""
    return all(set(a[k]) & set(b[k]) for k in a.keys() & b.keys())


def overlaps(scenarios: Iterable[Scenario]) -> list[tuple[Scenario, Scenario]]:
    """Pairs (winner, loser) of scenarios whose matches can hold for one trace."""
    ruled = sorted((s for s in scenarios if s.match), key=_rank)
    out = []
    for i, a in enumerate(ruled):
        for b in ruled[i + 1 :]:
            assert a.match is not None and b.match is not None
            if can_overlap(a.match, b.match):
                out.append((a, b))
    return out


def run_id_for(scenario: Scenario, started_unix_nano: int) -> str:
    """`production_run` (default production-{date}) with {date} the trace's UTC start date."""
    day = datetime.fromtimestamp(started_unix_nano / 1e9, UTC).date().isoformat()
    return (scenario.production_run or DEFAULT_RUN).format(date=day)


def llm_judges_sampled(
    conversation: ConversationFinished, scenario: Scenario, rate: float | None = None
) -> bool:
    """Whether this trial's LLM judges run: always off production; for a production trial,
    when it is in the sample at `rate` (a re-grade's `--sample`), else the scenario's."""
    if not conversation.production:
        return True
    return in_sample(conversation.trial_id, scenario.llm_judge_rate if rate is None else rate)
