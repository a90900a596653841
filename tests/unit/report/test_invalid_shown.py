"""Trials a simulated user spoiled (outcome `invalid`) where people look: the run report's
table, its text and its HTML page (`#invalid-trials`, the scenarios table's invalid
column), and `passk windows` (table and page). Every expected figure is counted here from
the trials the test made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from services.report.domain import build_report
from services.report.html import render_html
from services.report.over_time import render_windows_page
from services.report.render import print_report, print_windows
from services.report.windows import load_windows
from services.storage.records import trial_record
from services.storage.store import Store
from tests.unit.report.tables import table, tables
from tests.unit.storage import factories as f

RUN = "nightly-7"
# (scenario, trial, outcome, failed checks): `a` has two spoiled trials, `b` none
TRIALS: list[tuple[str, str, str, list[tuple[str, str]] | None]] = [
    ("a", "a-1", "passed", None),
    ("a", "a-2", "invalid", [("user:in_role", "answered as the assistant"), ("gate:exit", "no")]),
    ("a", "a-3", "passed", None),
    ("a", "a-4", "failed", [("gate:state", "billing lines missing")]),
    ("a", "a-5", "invalid", [("user:kept_secret", "said the fault code first")]),
    ("a", "a-6", "passed", None),
    ("b", "b-1", "passed", None),
    ("b", "b-2", "passed", None),
    ("b", "b-3", "passed", None),
]


def _verdicts(run_id: str = RUN, minute: int = 5) -> list:
    """TRIALS as verdicts of `run_id` (another run's trial ids get its name in front)."""
    prefix = "" if run_id == RUN else f"{run_id}:"
    return [
        f.verdict(
            prefix + trial, outcome, k=3, run_id=run_id, scenario_id=sid, failed=failed, when=i
        ).model_copy(update={"finished_at": f.T0 + timedelta(minutes=minute + i)})
        for i, (sid, trial, outcome, failed) in enumerate(TRIALS)
    ]


def _expected() -> dict[str, dict[str, int]]:
    """Per scenario, counted from TRIALS: n (the agent's trials) and invalid."""
    out: dict[str, dict[str, int]] = {}
    for sid, _, outcome, _ in TRIALS:
        c = out.setdefault(sid, {"n": 0, "invalid": 0, "passed": 0})
        if outcome == "invalid":
            c["invalid"] += 1
        else:
            c["n"] += 1
            c["passed"] += outcome == "passed"
    return out


SPOILED = {
    trial: "; ".join(f"{check}: {why}" for check, why in failed or [] if check.startswith("user:"))
    for _, trial, outcome, failed in TRIALS
    if outcome == "invalid"
}


def _text_table(text: str, first_column: str) -> dict[str, dict[str, str]]:
    """The first rich table printed in `text`: {first cell: {column: cell}}."""
    first = text[: text.index("└")]
    lines = [line for line in first.splitlines() if "│" in line or "┃" in line]
    split = [[c.strip() for c in line.strip()[1:-1].replace("┃", "│").split("│")] for line in lines]
    header, *body = split
    assert header[0] == first_column, header
    return {row[0]: dict(zip(header, row, strict=True)) for row in body if row[0]}


def test_the_report_page_lists_the_invalid_trials_and_counts_them_per_scenario() -> None:
    report = build_report(RUN, [trial_record(v) for v in _verdicts()])
    page = render_html(report, generated_at=datetime(2026, 11, 30, tzinfo=UTC))
    spoiled = table(page, id="invalid-trials")
    assert spoiled.headers == ["trial", "scenario", "user checks failed"]
    assert {r.attrs["data-trial"]: r.cells for r in spoiled.rows} == {
        trial: [trial, trial.split("-")[0], checks] for trial, checks in SPOILED.items()
    }
    scenarios = table(page, id="scenarios")
    expected = _expected()
    shown = {
        r.attrs["data-scenario"]: {k: int(r.figures[k]) for k in ("n", "invalid", "passed")}
        for r in scenarios.rows
    }
    assert shown == expected
    # the per-trial failed checks show a user check only on an invalid trial, said so
    failed = table(page, id="failed-checks")
    user_rows = {(r.cells[0], r.cells[2]) for r in failed.rows if r.cells[3].startswith("user:")}
    assert user_rows == {(trial, "invalid") for trial in SPOILED}


def test_a_report_without_invalid_trials_has_no_invalid_table() -> None:
    rows = [trial_record(v) for v in _verdicts() if v.outcome != "invalid"]
    page = render_html(build_report(RUN, rows), generated_at=datetime(2026, 11, 30, tzinfo=UTC))
    assert 'id="invalid-trials"' not in page


def test_the_text_report_has_an_invalid_column_and_names_each_spoiled_trial() -> None:
    console = Console(record=True, width=220)
    print_report(build_report(RUN, [trial_record(v) for v in _verdicts()]), console)
    text = console.export_text()
    rows = _text_table(text, "scenario")
    assert {sid: int(rows[sid]["invalid"]) for sid in ("a", "b")} == {
        sid: c["invalid"] for sid, c in _expected().items()
    }
    assert f"invalid (the simulated user failed a user check; out of n): {len(SPOILED)}" in text
    for trial, checks in SPOILED.items():
        assert f"{trial}: {checks}" in text


def _store(tmp_path: Path) -> str:
    """The trials in the projection twice: under RUN and under a ci run (left out of the
    default view), and the aggregate's own window record of the hour, carrying invalid."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    store = Store(url)
    expected = _expected()["a"]
    record = f.window(
        1, passed=2 * expected["passed"], failed=2 * (expected["n"] - expected["passed"]),
        scenario="a", start=f.T0,
    ).model_copy(update={"invalid": 2 * expected["invalid"]})  # fmt: skip
    store.apply_many([*_verdicts(), *_verdicts("ci-20261130T120000Z", 30), record])
    store.close()
    return url


def test_passk_windows_table_and_page_show_the_invalid_trials(tmp_path: Path) -> None:
    url = _store(tmp_path)
    expected = _expected()
    # counted again from RUN's trial rows (the default view leaves ci's out)
    recounted = {w.scenario_id: w for w in load_windows(url, 6, "1h", runs=None)}
    assert {sid: (w.n, w.invalid) for sid, w in recounted.items()} == {
        sid: (c["n"], c["invalid"]) for sid, c in expected.items()
    }
    # every run shown: the aggregate's own record, as it published it
    [aggregate] = load_windows(url, 6, "1h", runs="*")
    assert (aggregate.n, aggregate.invalid) == (
        2 * expected["a"]["n"],
        2 * expected["a"]["invalid"],
    )

    console = Console(record=True, width=250)
    print_windows(list(recounted.values()), console)
    rows = _text_table(console.export_text(), "scenario")
    assert {sid: (int(r["n"]), int(r["invalid"])) for sid, r in rows.items()} == {
        sid: (c["n"], c["invalid"]) for sid, c in expected.items()
    }

    page = render_windows_page(list(recounted.values()), generated_at=datetime.now(UTC))
    for sid, c in expected.items():
        [windows] = [t for t in tables(page) if t.rows and t.rows[0].attrs["data-scenario"] == sid]
        assert "invalid" in windows.headers
        [row] = windows.rows
        assert (int(row.figures["n"]), int(row.figures["invalid"])) == (c["n"], c["invalid"])
