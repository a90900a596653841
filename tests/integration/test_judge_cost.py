"""Judge cost and skip_when_gates_fail through the real broker: the gate, judge, verdict and
sink workers and the stand-in judge model, each in its own process.

Two scenarios with the same two LLM judges and the same four kinds of trial (passes,
fails the state gate, fails the exit gate, fails a judge); one says
`judging: {skip_when_gates_fail: true}`. The skipping one asks the model only for the
trials whose gates passed; both end with the same outcomes. Then `passk report` shows
per-trial judge tokens and cost and what skipping saved, and `passk show --json` opens
the trials failed by each gate and by a judge."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from schemas.events import Message
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.integration.test_judge import answering, http_json, metric
from tests.support import (
    ROOT,
    free_ports,
    isolated_env,
    produce,
    publish_scenarios,
    read_topic,
    running,
    wait_for,
    workers,
)
from tests.unit.factories import GOOD_STATE, conversation, scenario, session

pytestmark = pytest.mark.integration
PASSK = str(ROOT / ".venv/bin/passk")
JUDGES = [
    {"id": "asked_fault", "assertion": "The agent asked what the fault was."},
    {"id": "said_goodbye", "assertion": "The agent closed the conversation politely."},
]
KINDS = ("clean", "state", "exit", "judge")
EXPECTED = {"clean": "passed", "state": "failed", "exit": "failed", "judge": "failed"}
FAILED_BY = {"state": "gate:state", "exit": "gate:exit", "judge": "judge:asked_fault"}


def events(scenario_id: str, kind: str) -> list[Any]:
    trial = f"{scenario_id}-{kind}"
    said = "[[fail:asked_fault]]" if kind == "judge" else ""
    # Each transcript is its own (the trial id in it), so no two calls share a cache key.
    conv = conversation(
        trial,
        scenario_id=scenario_id,
        exit_reason="persona_exhausted" if kind == "exit" else "product_closed",
        transcript=[
            Message(role="assistant", content="What was the fault?"),
            Message(role="user", content=f"The pump seized ({trial})."),
            Message(role="assistant", content=f"Recorded. Goodbye. {said}"),
        ],
    )
    state = (
        {**GOOD_STATE, "report": {**GOOD_STATE["report"], "fault": ""}}
        if kind == "state"
        else GOOD_STATE
    )
    return [conv, session(trial, state=state)]


def passk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PASSK, *args], env=env, capture_output=True, text=True, timeout=120)


def test_skipping_judges_after_failed_gates_saves_calls_same_outcomes_and_cost_is_traced(
    settings: Settings, tmp_path: Path
) -> None:
    skipping = scenario(id="skipping", judges=JUDGES, judging={"skip_when_gates_fail": True})
    asking = scenario(id="asking", judges=JUDGES)
    publish_scenarios(settings, [skipping, asking])
    base = free_ports(2)
    standin_url, metrics_port = f"http://127.0.0.1:{base}", base + 1
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"{standin_url}/v1",
        OPENAI_API_KEY="standin",
        PASSK_JUDGE_CACHE="0",
    )
    log = tmp_path / "workers.log"
    with (
        running(
            ["judge-standin", "--port", str(base)], env, log, ready=lambda: answering(standin_url)
        ),
        workers(
            settings,
            ["gate", "judge", "verdict", "sink"],
            env,
            log,
            extra={"judge": {"PASSK_METRICS_PORT": str(metrics_port)}},
        ),
    ):
        for sc in ("skipping", "asking"):
            for kind in KINDS:
                for ev in events(sc, kind):
                    topic = (
                        Topic.CONVERSATION_FINISHED
                        if ev.type == "conversation_finished"
                        else Topic.SESSION_PERSISTED
                    )
                    produce(settings, topic, [(ev.session_id, encode(ev))])
        verdicts = {
            v["trial_id"]: v
            for _, v, _ in read_topic(settings, Topic.TRIAL_VERDICTS, min_count=8, timeout=90)
        }
        judged = {
            (v["trial_id"], v["judge_id"]): v
            for _, v, _ in read_topic(settings, Topic.JUDGE_VERDICTS, min_count=16, timeout=60)
        }
        stats = http_json(standin_url + "/stats")
        calls = metric(metrics_port, "passk_judge_call_seconds_count", judge="asked_fault")
        skipped_metric = metric(metrics_port, "passk_judge_skipped_total", judge="asked_fault")
        wait_for(lambda: _projected(settings, 8), timeout=60, what="8 trials in the projection")

    # Same outcomes with and without skipping, each as the case was built.
    for kind in KINDS:
        for sc in ("skipping", "asking"):
            v = verdicts[f"{sc}-{kind}"]
            assert v["outcome"] == EXPECTED[kind], v
            if kind in FAILED_BY:
                assert FAILED_BY[kind] in [fc["check"] for fc in v["failed_checks"]]
    # Skipped: the LLM judges of the skipping scenario's gate-failed trials; never an error.
    for sc in ("skipping", "asking"):
        for kind in KINDS:
            for j in ("asked_fault", "said_goodbye"):
                v = judged[(f"{sc}-{kind}", j)]
                if sc == "skipping" and kind in ("state", "exit"):
                    assert v["result"] == "skipped" and v["attempts"] == 0
                    assert v["input_tokens"] is None and v["latency_ms"] is None
                    continue
                assert v["result"] in ("passed", "failed")
                assert v["model"] == "passk-standin" and v["attempts"] == 1 and not v["cached"]
                assert v["input_tokens"] > 0 and v["output_tokens"] > 0 and v["latency_ms"] > 0
    assert verdicts["skipping-state"]["skipped_judges"] == ["asked_fault", "said_goodbye"]
    assert verdicts["asking-state"]["skipped_judges"] == []
    # The model was asked 2 judges x (4 asking trials + 2 skipping trials whose gates passed).
    assert stats["requests"] == 12
    assert calls == 6 and skipped_metric == 2

    # The report: per-trial judge tokens (equal to the verdicts' own), cost, what was saved.
    priced = {
        **env,
        "PASSK_JUDGE_PRICE_PER_MTOK_IN": "0.15",
        "PASSK_JUDGE_PRICE_PER_MTOK_OUT": "0.60",
    }
    done = passk(priced, "report", "--run-id", "run-1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for t in report["trials"]:
        mine = [v for (trial, _), v in judged.items() if trial == t["trial_id"]]
        tokens_in = sum(v["input_tokens"] or 0 for v in mine)
        tokens_out = sum(v["output_tokens"] or 0 for v in mine)
        assert (t["judge_input_tokens"], t["judge_output_tokens"]) == (tokens_in, tokens_out)
        assert t["judge_cost"] == pytest.approx((tokens_in * 0.15 + tokens_out * 0.60) / 1e6)
        assert t["judge_calls"] == sum(1 for v in mine if v["result"] != "skipped")
    cost = report["judge_cost"]
    assert (cost["calls"], cost["skipped"], cost["trials"]) == (12, 4, 8)
    assert [(j["judge_id"], j["trials"]) for j in cost["skipped_judges"]] == [
        ("asked_fault", 2),
        ("said_goodbye", 2),
    ]
    assert all(j["tokens_saved_estimate"] > 0 for j in cost["skipped_judges"])
    text = passk(env, "report", "--run-id", "run-1").stdout
    assert "skipped judge asked_fault: 2 trials whose gates had failed, 2 calls saved" in text
    assert "no cost: set PASSK_JUDGE_PRICE_PER_MTOK_IN" in text  # unpriced: tokens only

    # passk show on a trial failed by the exit gate, by the state gate and by a judge.
    shown = {}
    for kind in ("exit", "state", "judge"):
        done = passk(env, "show", f"asking-{kind}", "--json")
        assert done.returncode == 0, done.stderr
        shown[kind] = json.loads(done.stdout)
        view = shown[kind]
        assert view["outcome"] == "failed"
        assert [m["content"] for m in view["transcript"]][1] == f"The pump seized (asking-{kind})."
        verdict_of = {c["check"]: c["verdict"] for c in view["checks"]}
        assert verdict_of[FAILED_BY[kind]] == "failed"
    exit_checks = {x["check"]: x for x in shown["exit"]["expectations"]}
    assert exit_checks["exit:expected_exit"]["passed"] is False
    assert exit_checks["exit:expected_exit"]["expected"] == ["product_closed"]
    assert shown["exit"]["failing_paths"] == []
    state = {x["check"]: x for x in shown["state"]["expectations"]}
    assert shown["state"]["failing_paths"] == ["report.fault"]
    assert state["state:report.fault present"]["actual"] == ""
    assert state["state:report.parts present"]["passed"] is True
    judge = {j["judge_id"]: j for j in shown["judge"]["judges"]}
    assert (
        judge["asked_fault"]["result"] == "failed"
        and "[stand-in]" in judge["asked_fault"]["reason"]
    )
    assert shown["judge"]["judge_calls"] == 2 and shown["judge"]["judge_input_tokens"] > 0
    # The skipped trial shows its judges as skipped, not as errors.
    skipped_view = json.loads(passk(env, "show", "skipping-exit", "--json").stdout)
    assert {c["check"]: c["verdict"] for c in skipped_view["checks"]}[
        "judge:asked_fault"
    ] == "skipped"
    unknown = passk(env, "show", "no-such-trial")
    assert unknown.returncode == 3 and "unknown trial 'no-such-trial'" in unknown.stderr
    down = passk(
        {**env, "PASSK_DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x"}, "show", "asking-exit"
    )
    assert down.returncode == 4 and "Traceback" not in down.stderr


def _projected(settings: Settings, count: int) -> bool:
    from services.storage.store import Store

    store = Store(settings.database_url)
    try:
        return len(store.trials("run-1")) >= count
    finally:
        store.close()
