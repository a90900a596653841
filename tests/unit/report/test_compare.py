"""Comparing two runs: per-scenario change, the confident-regression flag, cost medians,
and `passk compare` exit codes against a real SQLite projection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.events import TrialMetrics
from services.cli.main import app
from services.grading.estimators import pass_hat_k_interval
from services.report.compare import compare_runs
from services.report.domain import build_report
from services.storage.records import trial_record
from services.storage.store import Store
from tests.unit.storage import factories as f


def run_rows(run: str, scenario: str, passed: int, n: int, *, turns: int = 6, start: int = 0):
    return [
        trial_record(
            f.verdict(
                f"{run}:{scenario}:{i}",
                "passed" if i < passed else "failed",
                run_id=run,
                scenario_id=scenario,
                when=start + i,
                metrics=TrialMetrics(
                    turns=turns, input_tokens=100, output_tokens=20, duration_ms=60_000
                ),
            )
        )
        for i in range(n)
    ]


def report(run: str, *specs: tuple[str, int, int]):
    rows = [r for scenario, passed, n in specs for r in run_rows(run, scenario, passed, n)]
    return build_report(run, rows)


def test_a_scenario_that_fell_apart_is_a_regression() -> None:
    comparison = compare_runs(
        report("base", ("steady", 10, 10), ("falls", 10, 10)),
        report("new", ("steady", 10, 10), ("falls", 2, 10)),
    )
    assert comparison.regressions == ["falls"]
    falls = next(s for s in comparison.scenarios if s.scenario_id == "falls")
    assert falls.base and falls.run
    # the flag is exactly the bounds of the documented interval not touching
    base_lower, _ = pass_hat_k_interval(10, 10, 3)
    _, run_upper = pass_hat_k_interval(10, 2, 3)
    assert run_upper < base_lower
    assert (falls.base.pass_hat_k_lower, falls.run.pass_hat_k_upper) == pytest.approx(
        (base_lower, run_upper)
    )
    assert falls.change == pytest.approx(falls.run.pass_hat_k - 1.0)


@pytest.mark.parametrize(
    ("base", "new"),
    [
        ((10, 10), (9, 10)),  # worse point estimate, overlapping intervals: noise
        ((3, 3), (1, 3)),  # too few trials to be confident either way
        ((2, 10), (10, 10)),  # better is never a regression
    ],
)
def test_overlapping_intervals_are_not_a_regression(base, new) -> None:
    comparison = compare_runs(report("b", ("s", *base)), report("r", ("s", *new)))
    assert comparison.regressions == []


def test_new_and_dropped_scenarios_are_listed_without_a_flag() -> None:
    comparison = compare_runs(report("b", ("old", 3, 3)), report("r", ("new", 0, 3)))
    rows = {
        s.scenario_id: (s.base is None, s.run is None, s.regression, s.change)
        for s in comparison.scenarios
    }
    assert rows == {"new": (True, False, False, None), "old": (False, True, False, None)}


def test_cost_medians_of_both_runs_are_shown_and_never_flag() -> None:
    base = build_report("b", run_rows("b", "s", 3, 3, turns=6))
    new = build_report("r", run_rows("r", "s", 3, 3, turns=30))
    (change,) = compare_runs(base, new).scenarios
    assert change.base and change.run
    assert (change.base.turns_median, change.run.turns_median) == (6, 30)
    assert change.run.tokens_median == 120 and change.run.duration_s_median == 60
    assert not change.regression


@pytest.fixture
def projection(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'projection.db'}"
    store = Store(url)
    rows = [
        *run_rows("build-41", "steady", 10, 10),
        *run_rows("build-41", "falls", 10, 10),
        *run_rows("build-42", "steady", 10, 10, start=100),
        *run_rows("build-42", "falls", 1, 10, start=100),
    ]
    for row in rows:
        store.apply(
            f.verdict(
                row.trial_id,
                row.outcome,
                run_id=row.run_id,
                scenario_id=row.scenario_id,
                when=row.verdict_at.timestamp() - f.at(0).timestamp(),
            )
        )
    store.close()
    return url


def passk(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


def test_compare_cli_json_and_exit_codes(projection: str) -> None:
    base = ["compare", "--base", "build-41", "--run", "build-42", "--database-url", projection]
    shown = passk(*base, "--json")
    assert shown.exit_code == 0, shown.output  # without the flag a regression is reported only
    data = json.loads(shown.output)
    assert data["regressions"] == ["falls"]
    assert [s["scenario_id"] for s in data["scenarios"]] == ["falls", "steady"]
    assert passk(*base, "--fail-on-regression").exit_code == 1
    swapped = ["compare", "--base", "build-42", "--run", "build-41", "--database-url", projection]
    assert passk(*swapped, "--fail-on-regression").exit_code == 0
    table = passk(*base)
    assert "REGRESSED" in table.output and "confidently worse" in table.output


def test_compare_with_an_unknown_run_has_nothing_to_compare(projection: str) -> None:
    done = passk("compare", "--base", "nope", "--run", "build-42", "--database-url", projection)
    assert done.exit_code == 3
    assert "nothing to compare" in done.output and "build-41" in done.output


def test_the_report_names_the_previous_run_of_the_same_scenarios(projection: str) -> None:
    done = passk("report", "--run-id", "build-42", "--json", "--database-url", projection)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["previous_run"] == "build-41"
    first = passk("report", "--run-id", "build-41", "--json", "--database-url", projection)
    assert json.loads(first.output)["previous_run"] is None


@pytest.mark.parametrize(("passed", "n"), [(3, 3), (0, 3), (10, 10), (2, 10), (5, 7)])
def test_the_figure_beside_each_interval_lies_in_it(passed: int, n: int) -> None:
    """3 of 3 at k=3 printed `1.000 [0.11, 0.96]`: the unbiased pass^k beside an interval
    that does not hold it. The figure shown is the posterior median, inside it."""
    import re

    from rich.console import Console

    from services.report.render import print_comparison

    comparison = compare_runs(report("base", ("s", passed, n)), report("new", ("s", passed, n)))
    [change] = comparison.scenarios
    assert change.run is not None
    figures = change.run
    assert figures.pass_hat_k_lower <= figures.pass_hat_k_median <= figures.pass_hat_k_upper
    console = Console(width=250, record=True)
    print_comparison(comparison, console)
    shown = re.findall(r"(\d\.\d+) \[(\d\.\d+), (\d\.\d+)\]", console.export_text())
    assert len(shown) == 2  # base and run
    for figure, lower, upper in shown:
        assert float(lower) <= float(figure) <= float(upper), (figure, lower, upper)
    if (passed, n) == (3, 3):  # the case the trial found
        assert figures.pass_hat_k == 1.0 and ("0.59", "0.11", "0.96") in shown
    assert "pass_hat_k_median" in comparison.model_dump()["scenarios"][0]["run"]
