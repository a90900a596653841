"""`passk windows --runs`: which runs a windows view shows (by default not make demo's nor
passk ci's), their windows counted again from the trial rows, and a single window drawn
over its own length."""

from __future__ import annotations

import json
from datetime import timedelta
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.report.over_time import over_time_figure, views
from services.report.run_windows import run_filter
from services.report.windows import load_windows
from services.storage.store import Store
from tests.unit.storage import factories as f

HOUR = f.T0  # 12:00 UTC, a window start


@pytest.mark.parametrize(
    ("pattern", "run_id", "shown"),
    [
        (None, "production-2026-11-30", True),
        (None, "build-43", True),
        (None, "demo-20261130T120000Z", False),
        (None, "ci-20261130T120000Z", False),
        ("production-*", "production-2026-11-30", True),
        ("production-*", "build-43", False),
        ("build-4", "build-43", True),  # no glob character: a prefix
        ("build-4", "xbuild-43", False),
        ("demo-*,ci-*", "ci-1", True),
        ("*", "demo-1", True),
        ("prod?ction-*", "production-1", True),
    ],
)
def test_which_runs_a_view_shows(pattern: str | None, run_id: str, shown: bool) -> None:
    assert run_filter(pattern)(run_id) is shown


def test_an_empty_pattern_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="at least one pattern"):
        run_filter(" , ")


def _store(tmp_path: Path) -> Store:
    """One scenario, one hour: 6 production trials (4 passed; 2 of the passed and the
    failed ones outside the LLM-judge sample: not_sampled), 5 of make demo's (all failed),
    3 of passk ci's (passed), and the aggregate's window over all 14 with its targets."""
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    events: list = []

    def trial(tid: str, run: str, outcome: str, minute: int) -> None:
        events.append(
            f.verdict(tid, outcome, run_id=run, scenario_id="s1").model_copy(
                update={"finished_at": HOUR + timedelta(minutes=minute)}
            )
        )

    for i, outcome in enumerate(["passed", "passed", "passed", "passed", "failed", "error"]):
        trial(f"p{i}", "production-2026-11-30", outcome, 5 + i)
    for i in range(5):
        trial(f"d{i}", "demo-20261130T120000Z", "failed", 20 + i)
    for i in range(3):
        trial(f"c{i}", "ci-20261130T120000Z", "passed", 30 + i)
    for tid in ("p0", "p1", "p4"):  # outside the sample
        events.append(
            f.judge(tid, "polite", "not_sampled", run_id="production-2026-11-30", scenario_id="s1")
        )
    for tid in ("p2", "p3", "p5"):
        events.append(
            f.judge(tid, "polite", "passed", run_id="production-2026-11-30", scenario_id="s1")
        )
    events.append(
        f.window(1, passed=7, failed=6, errors=1, scenario="s1", start=HOUR, target=(0.7, 2))
    )
    store.apply_many(events)
    return store


def test_the_default_view_leaves_out_the_demos_and_cis_runs(tmp_path: Path) -> None:
    _store(tmp_path).close()
    url = f"sqlite:///{tmp_path / 'p.db'}"
    [every] = load_windows(url, 6, "1h", runs="*")
    assert (every.n, every.passed, every.failed) == (14, 7, 6)  # the aggregate's record
    [w] = load_windows(url, 6, "1h", runs=None)
    # counted here: 6 production trials, 4 passed, 1 failed, 1 error
    assert (w.n, w.passed, w.failed, w.errors) == (6, 4, 1, 1)
    assert w.pass_hat_k == pytest.approx(comb(4, 3) / comb(6, 3))
    # sampled: p2, p3 (passed), p5 (error); p0, p1, p4 were not_sampled
    assert (w.n_sampled, w.passed_sampled) == (3, 2)
    assert w.pass_hat_k_sampled == pytest.approx(0.0)  # C(2,3) = 0
    assert (w.alert_min_pass_hat_k, w.alert_min_trials) == (0.7, 2)  # the aggregate's
    assert (w.window_start, w.window_end) == (HOUR, HOUR + timedelta(hours=1))
    [demo] = load_windows(url, 6, "1h", runs="demo-")
    assert (demo.n, demo.failed) == (5, 5)
    assert load_windows(url, 6, "1h", runs="nightly-*") == []


def test_passk_windows_runs_on_the_command_line(tmp_path: Path) -> None:
    from services.cli.main import app

    _store(tmp_path).close()
    url = f"sqlite:///{tmp_path / 'p.db'}"
    runner = CliRunner()
    shown = runner.invoke(app, ["windows", "--json", "--database-url", url])
    assert shown.exit_code == 0, shown.output
    assert [w["n"] for w in json.loads(shown.stdout)["windows"]] == [6]
    every = runner.invoke(app, ["windows", "--json", "--runs", "*", "--database-url", url])
    assert [w["n"] for w in json.loads(every.stdout)["windows"]] == [14]
    none = runner.invoke(app, ["windows", "--runs", "nightly-*", "--database-url", url])
    assert none.exit_code == 3
    bad = runner.invoke(app, ["windows", "--runs", ",", "--database-url", url])
    assert bad.exit_code == 2


def test_a_single_window_spans_its_own_length_on_the_time_axis(tmp_path: Path) -> None:
    store = _store(tmp_path)
    items = views(store.windows())
    store.close()
    fig = over_time_figure(items)
    start, end = (str(x) for x in fig.layout.xaxis.range)
    assert (start, end) == (HOUR.isoformat(), (HOUR + timedelta(hours=1)).isoformat())
    # three windows: from the first start to the last end
    later = [
        w.model_copy(
            update={
                "window_start": w.window_start + timedelta(hours=h),
                "window_end": w.window_end + timedelta(hours=h),
            }
        )
        for w in items
        for h in (0, 1, 2)
    ]
    fig = over_time_figure(later)
    assert [str(x) for x in fig.layout.xaxis.range] == [
        HOUR.isoformat(),
        (HOUR + timedelta(hours=3)).isoformat(),
    ]
