"""External checks through the real broker: the gate, verdict and sink workers, then
`passk report` as an operator runs it. A trial is failed by a gating external check alone,
passes with an advisory one failing, and every view names `external:<id>`."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from schemas.events import ExternalCheck
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.support import (
    free_ports,
    isolated_env,
    letter_key,
    passk,
    produce,
    publish_scenarios,
    read_topic,
    wait_for,
    workers,
)
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.integration

LEAK = "card number in turn 3"


def checks(*found: tuple[str, bool, str]) -> list[ExternalCheck]:
    return [ExternalCheck(id=i, passed=p, reason=r) for i, p, r in found]


# trial -> (its checks, expected outcome, expected failed checks, expected advisory checks)
CASES = {
    "clean": (checks(("pii_scan", True, "no PII")), "passed", [], []),
    "leaked": (checks(("pii_scan", False, LEAK)), "failed", ["external:pii_scan"], []),
    "curt": (
        checks(("tone", False, "curt"), ("pii_scan", True, "no PII")),
        "passed",
        [],
        ["external:tone"],
    ),
    "unreported": ([], "failed", ["external:pii_scan"], []),
}


def metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_external_checks_gate_only_when_the_scenario_names_them(
    settings: Settings, tmp_path: Path
) -> None:
    sc = scenario(judges=[], external_checks=["pii_scan"])
    publish_scenarios(settings, [sc])
    base = free_ports(3)
    log = tmp_path / "workers.log"
    processors = ["gate", "verdict", "sink"]
    ports = {name: {"PASSK_METRICS_PORT": str(base + i)} for i, name in enumerate(processors)}
    raw = json.loads(encode(conversation("dup")))
    with workers(settings, processors, isolated_env(settings), log, extra=ports, timeout=90):
        for trial, (found, _, _, _) in CASES.items():
            conv = conversation(trial, checks=found)
            produce(settings, Topic.CONVERSATION_FINISHED, [(conv.session_id, encode(conv))])
            produce(settings, Topic.SESSION_PERSISTED, [(conv.session_id, encode(session(trial)))])
        # refused, whole, with a reason: one id twice, and an id outside the pattern
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [
                (
                    "dup",
                    json.dumps(
                        {
                            **raw,
                            "checks": [
                                {"id": "pii_scan", "passed": True},
                                {"id": "pii_scan", "passed": False},
                            ],
                        }
                    ).encode(),
                ),
                (
                    "bad-id",
                    json.dumps(
                        {
                            **raw,
                            "trial_id": "bad-id",
                            "session_id": "bad-id",
                            "checks": [{"id": "pii scan!", "passed": True}],
                        }
                    ).encode(),
                ),
            ],
        )
        verdicts = read_topic(settings, Topic.TRIAL_VERDICTS, min_count=len(CASES), timeout=60)
        dead = read_topic(settings, Topic.DEAD_LETTERS, min_count=2, timeout=60)

        store = Store(settings.database_url)
        try:
            wait_for(
                lambda: len(store.trials("run-1")) == len(CASES),
                timeout=60,
                what="every trial in the projection",
            )
        finally:
            store.close()
        gate_port = base
        wait_for(
            lambda: metric(gate_port, "passk_external_checks_total") == 5,
            timeout=30,
            what="external checks counted",
        )
        counted = {
            (check, result): metric(
                gate_port, "passk_external_checks_total", check=check, result=result
            )
            for check, result in [
                ("external:pii_scan", "passed"),
                ("external:pii_scan", "failed"),
                ("external:pii_scan", "missing"),
                ("external:(unnamed)", "failed"),
            ]
        }
        # A re-grade reads the same checks from the log and grades them alike, as attempt 2.
        regraded = passk(settings, "regrade", "--run-id", "run-1", "--await-verdicts", "60")
        assert regraded.returncode == 0, regraded.stdout + regraded.stderr
        again = [
            v
            for _, v, _ in read_topic(
                settings, Topic.TRIAL_VERDICTS, min_count=2 * len(CASES), timeout=60
            )
            if v["attempt"] == 2
        ]

    by_trial = {v["trial_id"]: v for _, v, _ in verdicts}
    assert set(by_trial) == set(CASES)
    for trial, (_, outcome, failed, advisory) in CASES.items():
        v = by_trial[trial]
        assert v["outcome"] == outcome, (trial, v["failed_checks"])
        assert [c["check"] for c in v["failed_checks"]] == failed, trial
        assert [c["check"] for c in v["advisory_checks"]] == advisory, trial
        assert {"gate:exit", "gate:state"} <= set(v["checks_passed"]), "only the external check"
    assert {
        v["trial_id"]: (v["outcome"], v["failed_checks"], v["advisory_checks"]) for v in again
    } == {t: (v["outcome"], v["failed_checks"], v["advisory_checks"]) for t, v in by_trial.items()}
    assert "external:pii_scan" in by_trial["clean"]["checks_passed"]
    assert by_trial["leaked"]["failed_checks"][0]["reason"] == LEAK
    assert "not reported" in by_trial["unreported"]["failed_checks"][0]["reason"]
    assert counted == {
        ("external:pii_scan", "passed"): 2,
        ("external:pii_scan", "failed"): 1,
        ("external:pii_scan", "missing"): 1,
        ("external:(unnamed)", "failed"): 1,
    }

    reasons = {
        letter_key(d): d
        for _, d, _ in dead
        if d["source_topic"].endswith("conversation-finished.v1")
    }
    assert reasons["dup"]["reason"] == "invalid_field"
    assert "repeated: pii_scan" in reasons["dup"]["detail"]
    assert reasons["bad-id"]["reason"] == "invalid_field"
    assert "checks.0.id" in reasons["bad-id"]["detail"]

    shown = passk(settings, "report", "--run-id", "run-1", "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert {t["trial_id"]: [c["check"] for c in t["failed_checks"]] for t in report["trials"]} == {
        t: c[2] for t, c in CASES.items()
    }
    [failing] = [c for c in report["trials"] if c["trial_id"] == "leaked"]
    assert failing["failed_checks"] == [{"check": "external:pii_scan", "reason": LEAK}]
    assert [(c["check"], c["failed"], c["trials"]) for c in report["advisory_checks"]] == [
        ("external:tone", 1, 1)
    ]
    text = passk(settings, "report", "--run-id", "run-1")
    assert text.returncode == 0, text.stderr
    assert "external:pii_scan" in text.stdout and "advisory check external:tone" in text.stdout
    gate = passk(settings, "gate", "--run-id", "run-1")
    assert gate.returncode == 1 and "external:pii_scan x2" in gate.stdout
