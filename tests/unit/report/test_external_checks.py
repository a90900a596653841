"""External checks as every view of a run shows them: `external:<id>` in the report (text,
--json, --html), flakiness, the deploy gate, `passk compare`; advisory ones apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.events import ExternalCheckResult
from services.cli.main import app
from services.report.compare import compare_runs
from services.report.domain import build_report
from services.storage.records import trial_record
from services.storage.store import Store
from tests.unit.storage import factories as f

LEAK = "card number in turn 3"


def tone(passed: bool) -> ExternalCheckResult:
    return ExternalCheckResult(
        check="external:tone", passed=passed, gating=False, reason="warm" if passed else "curt"
    )


def run_verdicts(run: str, leaks: int, start: float = 0) -> list:
    """Scenario `pii` (5 trials): the first `leaks` fail external:pii_scan only, and every
    trial reports an advisory external:tone, failing in the even ones."""
    out = []
    for i in range(5):
        leaked = i < leaks
        out.append(
            f.verdict(
                f"{run}:pii:{i}",
                "failed" if leaked else "passed",
                run_id=run,
                scenario_id="pii",
                when=start + i,
                failed=[("external:pii_scan", LEAK)] if leaked else [],
                advisory_checks=[tone(i % 2 == 1)],
            )
        )
    return out


def test_the_report_names_external_checks_and_keeps_advisory_ones_apart() -> None:
    report = build_report("b2", [trial_record(v) for v in run_verdicts("b2", leaks=2)])
    [failing] = report.failing_checks
    assert (failing.check, failing.failures, failing.example_reason) == (
        "external:pii_scan",
        2,
        LEAK,
    )
    [flaky] = report.flakiness
    assert [(c.check, c.failures, c.trials) for c in flaky.checks] == [("external:pii_scan", 2, 5)]
    [advisory] = report.advisory_checks
    assert (advisory.check, advisory.trials, advisory.failed, advisory.example_reason) == (
        "external:tone",
        5,
        3,
        "curt",
    )
    assert report.scenarios[0].failed == 2  # the advisory failures counted in none


@pytest.fixture
def projection(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'projection.db'}"
    store = Store(url)
    for v in [*run_verdicts("b1", leaks=0), *run_verdicts("b2", leaks=2, start=100)]:
        store.apply(v)
    store.close()
    return url


def passk(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


def test_report_json_text_and_html(projection: str, tmp_path: Path) -> None:
    shown = passk("report", "--run-id", "b2", "--json", "--database-url", projection)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    failed = {t["trial_id"]: [c["check"] for c in t["failed_checks"]] for t in data["trials"]}
    assert failed == {
        "b2:pii:0": ["external:pii_scan"],
        "b2:pii:1": ["external:pii_scan"],
        "b2:pii:2": [],
        "b2:pii:3": [],
        "b2:pii:4": [],
    }
    assert [c["check"] for c in data["flakiness"][0]["checks"]] == ["external:pii_scan"]
    assert data["advisory_checks"] == [
        {
            "check": "external:tone",
            "scenarios": ["pii"],
            "trials": 5,
            "failed": 3,
            "example_reason": "curt",
        }
    ]
    assert [c["check"] for c in data["trials"][2]["advisory_checks"]] == ["external:tone"]

    page = tmp_path / "report.html"
    text = passk("report", "--run-id", "b2", "--html", str(page), "--database-url", projection)
    assert text.exit_code == 0, text.output
    assert "external:pii_scan" in text.output
    assert "advisory check external:tone" in text.output and "failed 3 of 5" in text.output
    html = page.read_text()
    assert len(re.findall(r'<tr data-scenario="pii" data-check="external:pii_scan"', html)) == 2
    assert '<table id="advisory-checks">' in html and 'data-check="external:tone"' in html


def test_the_deploy_gate_says_which_external_check_failed(projection: str) -> None:
    done = passk("gate", "--run-id", "b2", "--database-url", projection)
    assert done.exit_code == 1
    assert "external:pii_scan x2: card number in turn 3" in done.output
    assert "advisory check external:tone" in done.output
    assert passk("gate", "--run-id", "b1", "--database-url", projection).exit_code == 0


def test_compare_shows_the_external_check_that_moved(projection: str) -> None:
    done = passk("compare", "--base", "b1", "--run", "b2", "--json", "--database-url", projection)
    assert done.exit_code == 0, done.output
    [check] = json.loads(done.output)["checks"]
    assert (check["check"], check["base_failures"], check["run_failures"]) == (
        "external:pii_scan",
        0,
        2,
    )
    assert check["run_share"] == pytest.approx(0.4)
    table = passk("compare", "--base", "b1", "--run", "b2", "--database-url", projection)
    assert "external:pii_scan" in table.output and "2 (40%)" in table.output


def test_compare_orders_checks_by_added_failures() -> None:
    def rows(run: str, failed: list[list[str]]):
        return [
            trial_record(
                f.verdict(
                    f"{run}:{i}",
                    "failed" if c else "passed",
                    run_id=run,
                    scenario_id="s",
                    when=i,
                    failed=[(x, "why") for x in c],
                )
            )
            for i, c in enumerate(failed)
        ]

    base = build_report("a", rows("a", [["gate:exit"], ["gate:exit"], []]))
    run = build_report("b", rows("b", [["external:x"], ["gate:exit"], []]))
    moved = [(c.check, c.base_failures, c.run_failures) for c in compare_runs(base, run).checks]
    assert moved == [("external:x", 0, 1), ("gate:exit", 2, 1)]
