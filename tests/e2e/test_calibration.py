"""Calibration through the real broker, as an operator runs it: who may fail a trial is
decided by the judges' calibrations, and human labels sent through Kafka grow the sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.calibration_sets import items, scenario_yaml, send_trial, verdict_of, write_set
from tests.e2e.conftest import PROCESSORS, Pipeline, running_pipeline
from tests.support import read_topic, wait_for

pytestmark = pytest.mark.e2e


def ok(result: Any) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return str(result.stdout)


def calibrate_then_grade(
    p: Pipeline, suite: Path, counts: tuple[int, int, int, int], trial_id: str, said: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Judge `checked`'s labelled set made of `counts` (as `items` takes them), calibrated;
    then a trial of calib-flow in which the user says `said`: the calibration's JSON and
    the trial's verdict."""
    write_set(suite / "calibration", "checked", items("checked", *counts))
    calibrated = json.loads(ok(p.passk("calibrate", str(suite / "calibration"), "--json")))
    send_trial(p.settings, trial_id, "calib-flow", said, run_id="calib-run")
    return calibrated, verdict_of(p.settings, trial_id)


@pytest.fixture
def advisory_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"uncalibrated_judges": "advisory"})


def test_a_judge_gates_only_while_calibrated_above_the_bar(
    advisory_settings: Settings, tmp_path: Path
) -> None:
    settings = advisory_settings
    suite = tmp_path / "suite"
    scenario_yaml(suite / "scenarios", "calib-flow", {"checked": None, "fresh": None})
    with running_pipeline(settings, tmp_path, PROCESSORS) as p:
        ok(p.passk("scenarios", "publish", str(suite / "scenarios")))
        said = "Replaced the pump. [[fail:checked]] [[fail:fresh]]"

        # below the bar (precision 6/10): advisory; `fresh` has no calibration: advisory
        low, first = calibrate_then_grade(p, suite, (6, 4, 0, 5), "t-low", said)
        assert low["judges"][0]["gating"] is False
        assert first["outcome"] == "passed", first
        assert first["gating_judges"] == []
        why = {a["judge_id"]: a["why"] for a in first["advisory_judges"]}
        assert why["checked"].startswith("below the bar: precision 0.60")
        assert why["fresh"] == "uncalibrated"
        assert {a["result"] for a in first["advisory_judges"]} == {"failed"}

        # the method's example (precision 0.85 on 20 labels): it gates again
        high, second = calibrate_then_grade(p, suite, (11, 2, 1, 6), "t-high", said)
        assert high["judges"][0]["gating"] is True
        assert second["outcome"] == "failed", second
        assert [c["check"] for c in second["failed_checks"]] == ["judge:checked"]
        assert second["gating_judges"] == ["checked"]
        assert [a["judge_id"] for a in second["advisory_judges"]] == ["fresh"]

        # the report and the gate list advisory judges, with why, apart from failed checks
        p.wait_settled()
        rows = json.loads(ok(p.passk("report", "--run-id", "calib-run", "--json")))
        advisory = {j["judge_id"]: j for j in rows["advisory_judges"]}
        assert set(advisory) == {"checked", "fresh"}
        # `checked` was advisory for t-low only (it gated t-high); `fresh` for both
        assert (
            advisory["checked"]["why"],
            advisory["checked"]["verdicts"],
            advisory["checked"]["failed"],
        ) == ("below the bar: precision 0.60 < 0.80", 1, 1)
        assert (
            advisory["fresh"]["why"],
            advisory["fresh"]["verdicts"],
            advisory["fresh"]["failed"],
        ) == ("uncalibrated", 2, 2)
        assert advisory["fresh"]["scenarios"] == ["calib-flow"]
        gate = p.passk("gate", "--run-id", "calib-run")
        assert gate.returncode == 1
        assert "advisory judge fresh (uncalibrated)" in gate.stdout
        # the old result stays explainable: t-low still says why `checked` was advisory
        assert {t["trial_id"]: t["outcome"] for t in rows["trials"]} == {
            "t-low": "passed",
            "t-high": "failed",
        }


@pytest.mark.alone
def test_labels_through_kafka_update_the_matrix_grow_the_set_and_survive_a_kill(
    advisory_settings: Settings, tmp_path: Path
) -> None:
    settings = advisory_settings
    suite = tmp_path / "suite"
    scenario_yaml(suite / "scenarios", "calib-labels", {"lj": None})
    write_set(suite / "calibration", "lj", items("lj", 5, 0, 0, 5))
    with running_pipeline(settings, tmp_path, PROCESSORS) as p:
        ok(p.passk("scenarios", "publish", str(suite / "scenarios")))
        base = json.loads(ok(p.passk("calibrate", str(suite / "calibration"), "--json")))
        version = base["judges"][0]["judge_version"]
        send_trial(settings, "l1", "calib-labels", "Done. [[fail:lj]]", run_id="calib-run")
        send_trial(settings, "l2", "calib-labels", "Done. [[fail:lj]]", run_id="calib-run")
        send_trial(settings, "l3", "calib-labels", "Done, nothing odd.", run_id="calib-run")
        for t in ("l1", "l2", "l3"):
            verdict_of(settings, t)

        ok(p.passk("label", "l1", "--judge", "lj", "--pass", "--note", "it was fine"))  # FP
        ok(p.passk("label", "l1", "--judge", "lj", "--pass", "--note", "it was fine"))  # again
        ok(p.passk("label", "l2", "--judge", "lj", "--fail"))  # TP
        p.kill("calibration")  # SIGKILL, whatever it had or had not done
        ok(p.passk("label", "l3", "--judge", "lj", "--fail", "--note", "missed it"))  # FN
        ok(p.passk("label", "l2", "--judge", "lj", "--fail"))  # a repeat, while it is down
        p.start_worker("calibration")

        def running() -> dict[str, Any] | None:
            latest = [
                v
                for _, v, _ in read_topic(settings, Topic.JUDGE_CALIBRATIONS)
                if v["judge_version"] == version and v["source"] == "labels"
            ]
            if latest and latest[-1]["n"] == 13:
                return latest[-1]
            return None

        try:
            final = wait_for(running, timeout=180, interval=1.0, what="the running matrix")
        except AssertionError as exc:  # say what was published, and what the worker said
            seen = [
                (v["source"], v["n"]) for _, v, _ in read_topic(settings, Topic.JUDGE_CALIBRATIONS)
            ]
            raise AssertionError(f"{exc}\npublished: {seen}\n{p.explain('calibration')}") from None
        assert (final["tp"], final["fp"], final["fn"], final["tn"]) == (6, 1, 1, 5)
        assert final["precision"] == pytest.approx(6 / 7)
        assert final["recall"] == pytest.approx(6 / 7)
        p.wait_settled()
        # never more than 13: each label counted once, before and after the kill
        assert all(
            v["n"] <= 13
            for _, v, _ in read_topic(settings, Topic.JUDGE_CALIBRATIONS)
            if v["judge_version"] == version
        )

        history = json.loads(ok(p.passk("calibrate", "--history", "lj", "--json")))["history"]
        assert history[0]["source"] == "set" and history[0]["n"] == 10
        assert history[-1]["source"] == "labels" and history[-1]["n"] == 13

        grown = tmp_path / "grown"
        write_set(grown, "lj", items("lj", 5, 0, 0, 5))
        ok(p.passk("calibrate", "--export", str(grown)))
        lines = [json.loads(x) for x in (grown / "lj.jsonl").read_text().splitlines()]
        added = {x["id"]: x for x in lines[10:]}
        assert set(added) == {"trial:l1", "trial:l2", "trial:l3"}
        assert (added["trial:l1"]["label"], added["trial:l3"]["label"]) == ("pass", "fail")
        assert "[[fail:lj]]" in json.dumps(added["trial:l1"]["transcript"])
        # the grown set calibrates to the running matrix
        again = json.loads(
            ok(
                p.passk(
                    "calibrate",
                    str(grown),
                    "--json",
                    "--no-publish",
                    "--scenarios",
                    str(suite / "scenarios"),
                )
            )
        )
        row = again["judges"][0]
        assert (row["tp"], row["fp"], row["fn"], row["tn"]) == (6, 1, 1, 5)


def test_uncalibrated_policy_gating_restores_the_old_behaviour(
    tmp_path: Path, shared_pipeline: Pipeline
) -> None:
    """PASSK_UNCALIBRATED_JUDGES=gating (the tests' default): an uncalibrated judge fails."""
    pipeline, settings = shared_pipeline, shared_pipeline.settings
    assert settings.uncalibrated_judges == "gating"
    suite = tmp_path / "suite"
    scenario_yaml(suite / "scenarios", "calib-old", {"fresh": None})
    ok(pipeline.passk("scenarios", "publish", str(suite / "scenarios")))
    send_trial(settings, "t-old", "calib-old", "Done. [[fail:fresh]]", run_id="calib-run")
    verdict = verdict_of(settings, "t-old")
    assert verdict["outcome"] == "failed" and verdict["gating_judges"] == ["fresh"]
