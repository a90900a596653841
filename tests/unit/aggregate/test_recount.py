"""Recounting the aggregate's table from verdicts, and the corrections that make a table
that lost writes hold it again: checked against counts made here from the verdicts."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

from schemas.events import TrialVerdict
from services.aggregate import domain
from services.aggregate.recount import TableView, changed_scopes, corrections, recount
from services.grading.windows import parse_windows

NOW = 1_000 * 86400.0
CONFIG = domain.Config(sizes=parse_windows("1h,1d"), retention_s=7 * 86400)


def part(scenario_id: str) -> int:
    return 0 if scenario_id == "a" else 1


def verdicts(n: int, seed: int = 3) -> list[tuple[TrialVerdict, float]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = NOW - rng.uniform(0, 6 * 3600)
        out.append(
            (
                TrialVerdict(
                    event_id=f"v{i}",
                    trial_id=f"t{i}",
                    run_id=f"r{i % 2}",
                    scenario_id=rng.choice("ab"),
                    scenario_version="v1",
                    session_id=f"s{i}",
                    k=3,
                    outcome=rng.choice(["passed", "passed", "failed", "error"]),
                    finished_at=datetime.fromtimestamp(at, UTC),
                ),
                at + 2,
            )
        )
    return sorted(out, key=lambda p: p[0].finished_at)  # type: ignore[arg-type,return-value]


def expected(pairs: list[tuple[TrialVerdict, float]]) -> Counter[tuple[str, str, str]]:
    """(scenario, scope key, outcome) -> trials, counted here from the verdicts."""
    out: Counter[tuple[str, str, str]] = Counter()
    for v, _ in pairs:
        at = v.finished_at.timestamp()  # type: ignore[union-attr]
        name = "errors" if v.outcome == "error" else v.outcome
        for scope in (
            f"run:{v.run_id}",
            f"1h:{int(at // 3600) * 3600}",
            f"1d:{int(at // 86400) * 86400}",
        ):
            out[(v.scenario_id, scope, name)] += 1
    return out


def counted(table: dict) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for scenario, scope, p, f, e in TableView(table).scopes():
        for name, n in (("passed", p), ("failed", f), ("errors", e)):
            if n:
                out[(scenario, scope, name)] += n
    return out


def test_recount_holds_every_trial_once() -> None:
    pairs = verdicts(300)
    table = recount(pairs, CONFIG, part)
    assert counted(table) == expected(pairs)
    view = TableView(table)
    for v, _ in pairs:
        memory = view.trial(v.scenario_id, v.trial_id)
        assert memory is not None and len(memory[2]) == 3 and memory[1] == v.outcome


def test_corrections_repair_a_table_that_lost_writes() -> None:
    pairs = verdicts(200)
    live = recount(pairs, CONFIG, part)
    # a crash lost the last changes of one window bucket and a trial's memory
    bucket = next(k for k in live if k.startswith("b|a|w|1h|"))
    live[bucket] = {**live[bucket], "passed": live[bucket]["passed"] + 4, "seq": 2}
    lost = next(k for k in live if k.startswith("t|b|"))
    del live[lost]
    writes = corrections(live, recount(pairs, CONFIG, part), None, part)
    assert changed_scopes(live, writes) >= 1
    fixed = dict(live)
    for c in writes:
        if c.value is None:
            fixed.pop(c.key, None)
        else:
            fixed[c.key] = c.value
    assert counted(fixed) == expected(pairs)
    # each written bucket's number goes past the old one: its figure has a new event id
    for c in writes:
        if c.key.startswith("b|") and c.key in live:
            assert c.value is not None and c.value["seq"] > live[c.key]["seq"]
    # a verdict read again afterwards finishes nothing and counts nothing twice
    v, at = pairs[0]
    step = domain.apply(fixed.get, v, part(v.scenario_id), CONFIG, now=at)
    assert step.note == "duplicate"
    assert all(not k.startswith("b|") for k, _ in step.writes)


def test_corrections_of_one_scenario_leave_the_others_alone() -> None:
    pairs = verdicts(100)
    live = recount(pairs, CONFIG, part)
    other = {k: v for k, v in live.items() if k.startswith(("t|b|", "b|b|"))}
    broken = {
        **live,
        **{k: {**v, "passed": v["passed"] + 1} for k, v in live.items() if k.startswith("b|b|")},
    }
    writes = corrections(
        broken, recount([p for p in pairs if p[0].scenario_id == "a"], CONFIG, part), {"a"}, part
    )
    assert all(c.key.split("|")[1] == "a" or c.key.startswith("p|") for c in writes)
    assert other  # scenario b had state, and none of it was touched


def test_the_table_copied_to_disk_reads_as_the_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    from types import SimpleNamespace

    from services.aggregate.table import DiskTable

    pairs = verdicts(80)
    table = recount(pairs, CONFIG, part)
    gone = next(k for k in table if k.startswith("t|"))
    records = [
        SimpleNamespace(key=json.dumps(k).encode(), value=json.dumps(v).encode())
        for k, v in table.items()
    ]
    # a tombstone after its key was written, then the key again in a later batch
    records.append(SimpleNamespace(key=json.dumps(gone).encode(), value=None))
    disk = DiskTable(tmp_path / "t.db")
    disk.fold(records)
    del table[gone]
    assert sorted(TableView(disk).scopes()) == sorted(TableView(table).scopes())
    for v, _ in pairs:
        assert TableView(disk).trial(v.scenario_id, v.trial_id) == TableView(table).trial(
            v.scenario_id, v.trial_id
        )
