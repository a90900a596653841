"""A judge outage longer than PASSK_JUDGE_WAIT_S ends trials `error`; once the judge model
is back, `passk regrade --errors-only` grades them again through the real broker and every
worker: the report shows the right outcomes, the projection's history keeps both
verdicts, and the aggregate's figures move from error to passed instead of adding."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.e2e.conftest import running_pipeline
from tests.support import ROOT, read_topic, wait_for

pytestmark = pytest.mark.e2e
SCENARIOS = ROOT / "examples" / "scenarios"
JUDGE_WAIT_S = "12"


def _ok(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def latest_figures(settings: Settings, run_id: str) -> dict[tuple[str, str], dict]:
    """The last reliability record of each (scenario, run or window start)."""
    last: dict[tuple[str, str], dict] = {}
    for _, value, _ in read_topic(settings, Topic.SCENARIO_RELIABILITY):
        scope = value["run_id"] or f"{value['window']}@{value['window_start']}"
        if value["run_id"] in (None, run_id):
            last[(value["scenario_id"], scope)] = value
    return last


def test_regrade_after_a_judge_outage(settings: Settings, tmp_path: Path) -> None:
    processors = ["gate", "verdict", "judge", "sink", "aggregate"]
    run_id = "regrade-run"
    with running_pipeline(settings, tmp_path, processors, PASSK_JUDGE_WAIT_S=JUDGE_WAIT_S) as p:
        port = urlparse(p.env["OPENAI_BASE_URL"]).port
        assert port is not None
        p.kill("judge-standin")  # the judge model is down from the start
        traffic, expected_file = tmp_path / "traffic.jsonl", tmp_path / "expected.json"
        _ok(p.passk("scenarios", "publish", str(SCENARIOS)))
        _ok(
            p.passk(
                "generate",
                "--scenarios",
                str(SCENARIOS),
                "--run-id",
                run_id,
                "--out",
                str(traffic),
                "--expected",
                str(expected_file),
                "--trials",
                "3",
                "--seed",
                "5",
                "--default-pass-prob",
                "1.0",
            )
        )
        expected = {
            t["trial_id"]: t["expected_outcome"]
            for t in json.loads(expected_file.read_text())["trials"]
        }
        _ok(p.passk("replay", str(traffic)))
        _ok(p.passk("wait", "--run-id", run_id, "--trials", str(len(expected)), "--timeout", "300"))
        store = Store(settings.database_url)
        before = {t.trial_id: t for t in store.trials(run_id)}
        errored = {t for t, row in before.items() if row.outcome == "error"}
        assert len(errored) >= 6, Counter(r.outcome for r in before.values())
        for trial in errored:  # the judges' verdicts never came within the wait: the judge
            # holds its calls while the model is down, so the verdict's deadline fired
            assert before[trial].failed_checks, trial
            for check in before[trial].failed_checks:
                assert check["check"].startswith("judge:"), check
                assert f"no result within {JUDGE_WAIT_S} s" in check["reason"], check
        wait_for(
            lambda: any(v["errors"] for v in latest_figures(settings, run_id).values()),
            timeout=120,
            what="the aggregate counted the errors",
        )

        p.start("judge-standin", "judge-standin", "--host", "127.0.0.1", "--port", str(port))
        wait_for(lambda: _answers(port), timeout=60, what="the stand-in back")
        # as an operator would: re-grade once the judge answers again, i.e. once it has
        # delivered the calls it held through the outage (its lag drained); asked sooner,
        # a re-grade can outwait PASSK_JUDGE_WAIT_S itself and end `error` again
        p.wait_settled(timeout=300, processors=["judge"])
        out = p.passk("regrade", "--run-id", run_id, "--errors-only", "--await-verdicts", "300")
        _ok(out)
        assert out.stdout.count("sent") == len(errored), out.stdout
        assert "1 -> 2" in out.stdout

        # every trial now has exactly the outcome it should have had
        _ok(
            p.passk(
                "wait", "--run-id", run_id, "--expected", str(expected_file), "--timeout", "120"
            )
        )
        report = json.loads(_ok(p.passk("report", "--run-id", run_id, "--json")))
        assert {t["trial_id"]: t["outcome"] for t in report["trials"]} == expected
        assert sum(s["errors"] for s in report["scenarios"]) == 0
        assert sum(s["n"] for s in report["scenarios"]) == len(expected)

        # the history keeps both verdicts of every re-graded trial, the rest once
        history: dict[str, list[tuple[int, str]]] = {}
        for row in store.history(run_id):
            history.setdefault(row.trial_id, []).append((row.attempt, row.outcome))
        for trial in expected:
            if trial in errored:
                assert history[trial] == [(1, "error"), (2, expected[trial])], trial
            else:
                assert history[trial] == [(1, expected[trial])], trial

        # a second --errors-only finds nothing left to do
        again = p.passk("regrade", "--run-id", run_id, "--errors-only")
        assert again.returncode == 3, again.stdout + again.stderr

        # the aggregate moved each re-graded trial: same n, no errors left, in the run
        # and in every window
        per_scenario = Counter(row.scenario_id for row in before.values())

        def moved() -> bool | str:
            totals: Counter[tuple[str, str]] = Counter()
            errors = 0
            for (scenario, scope), v in latest_figures(settings, run_id).items():
                size = "run" if scope == run_id else scope.split("@")[0]
                totals[(scenario, size)] += v["n"]  # a window size's windows add up
                errors += v["errors"]
            want = {(s, size): n for s, n in per_scenario.items() for size in ("run", "1h", "1d")}
            if dict(totals) != want or errors:
                return f"figures {dict(totals)}, errors {errors}; want {want}, no errors"
            return True

        wait_for(moved, timeout=180, interval=2.0, what="the aggregate moved the re-grades")
        p.wait_settled(timeout=180, processors=processors)
