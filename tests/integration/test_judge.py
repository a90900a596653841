"""The judge processor as a Faust worker, through the real broker and the stand-in server."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.events import Message
from services.cli.status import processor_status
from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.judge.prompt import PROMPT_HASH
from tests.support import (
    free_ports,
    isolated_env,
    produce,
    publish_scenarios,
    read_topic,
    running,
    wait_for,
)
from tests.unit.factories import conversation, scenario
from tests.unit.judge.test_cache import CacheContract

pytestmark = pytest.mark.integration

JUDGES = [
    {"id": "asked_fault", "assertion": "The agent asked what the fault was."},
    {"id": "said_goodbye", "assertion": "The agent closed the conversation politely."},
    {"id": "no_apology", "kind": "regex", "pattern": "(?i)sorry", "must_match": False},
]
LLM_JUDGES = ("asked_fault", "said_goodbye")
FAULTS = {
    "429": "rate_limited",
    "500": "server_error",
    "hang": "timeout",
    "malformed": "malformed_answer",
}


def joined(settings: Settings) -> bool:
    # Its group is stable with a member (the judge commits nothing before its first trial).
    return all(s.ready for s in processor_status(["judge"], settings))


def http_json(url: str, method: str = "GET") -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
        return json.loads(r.read())


def answering(url: str) -> bool:
    try:
        return bool(http_json(url + "/stats")["stand_in"])
    except OSError:
        return False


def metric(port: int, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name)] not in "{ ":
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def trial(trial_id: str, *said: str) -> Any:
    return conversation(
        trial_id,
        transcript=[
            Message(role="assistant", content="What was the fault?"),
            Message(role="user", content="The pump seized."),
            Message(role="assistant", content=" ".join(("Recorded. Goodbye.", *said))),
        ],
    )


def verdicts_by_pair(settings: Settings) -> dict[tuple[str, str], list[dict[str, Any]]]:
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for key, v, _ in read_topic(settings, Topic.JUDGE_VERDICTS):
        assert key == v["trial_id"].encode()
        pairs.setdefault((v["trial_id"], v["judge_id"]), []).append(v)
    return pairs


def graded(settings: Settings, trial_ids: list[str]) -> dict[tuple[str, str], list[dict]] | None:
    pairs = verdicts_by_pair(settings)
    wanted = {(t, j["id"]) for t in trial_ids for j in JUDGES}
    return pairs if wanted <= set(pairs) else None


def test_every_judge_gets_a_verdict_faults_error_replays_hit_the_cache_outages_drain(
    settings: Settings, tmp_path: Path
) -> None:
    sc = scenario(judges=JUDGES)
    publish_scenarios(settings, [sc])
    standin_port, metrics_port = free_ports(1), free_ports(1)
    standin_url = f"http://127.0.0.1:{standin_port}"
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"{standin_url}/v1",
        OPENAI_API_KEY="standin",
        PASSK_JUDGE_MAX_RETRIES="2",
        PASSK_JUDGE_TIMEOUT_S="1.5",
        PASSK_JUDGE_CONCURRENCY="8",
        PASSK_METRICS_PORT=str(metrics_port),
    )
    standin_args = ["judge-standin", "--port", str(standin_port), "--retry-after", "0.2"]
    log = tmp_path / "processes.log"

    normal = {f"ok-{i}": trial(f"ok-{i}", f"(case {i})") for i in range(6)}
    normal["ok-fail"] = trial("ok-fail", "[[fail:asked_fault]]")
    normal["ok-sorry"] = trial("ok-sorry", "Sorry for the wait. [[fail:said_goodbye]]")
    faulty = {f"fault-{f}": trial(f"fault-{f}", f"[[standin:{f}]]") for f in FAULTS}

    with running(["worker", "judge"], env, log):
        with running(standin_args, env, log, ready=lambda: answering(standin_url)):
            wait_for(lambda: joined(settings), timeout=90, what="judge worker joined")
            produce(
                settings,
                Topic.CONVERSATION_FINISHED,
                [(t.session_id, encode(t)) for t in [*normal.values(), *faulty.values()]],
            )
            produce(
                settings,
                Topic.CONVERSATION_FINISHED,
                [
                    ("bad-1", b"{not json"),
                    ("bad-2", encode(conversation("ghost", scenario_id="no-such-scenario"))),
                ],
            )
            pairs = wait_for(
                lambda: graded(settings, [*normal, *faulty]),
                timeout=90,
                what="a verdict for every judge of every trial",
            )
            dead = read_topic(settings, Topic.DEAD_LETTERS, min_count=2)

            # --- every judge of every trial: one verdict, of the documented shape
            for (trial_id, judge_id), verdicts in pairs.items():
                assert {v["event_id"] for v in verdicts} == {
                    f"judge:{trial_id}:{judge_id}:{sc.version}"
                }
                v = verdicts[0]
                assert v["scenario_version"] == sc.version and v["run_id"] == "run-1"
                assert v["judge_spec"]["id"] == judge_id
                if judge_id in LLM_JUDGES:
                    assert v["prompt_hash"] == PROMPT_HASH and v["attempts"] >= 1
            results = {pair: vs[0]["result"] for pair, vs in pairs.items()}
            for trial_id in normal:
                for judge_id in LLM_JUDGES:
                    v = pairs[(trial_id, judge_id)][0]
                    assert v["model"] == "passk-standin" and v["reason"].startswith("[stand-in]")
                    assert v["input_tokens"] > 0 and v["output_tokens"] > 0
            assert results[("ok-fail", "asked_fault")] == "failed"
            assert results[("ok-sorry", "said_goodbye")] == "failed"
            assert results[("ok-sorry", "no_apology")] == "failed"
            assert Counter(r for (t, _), r in results.items() if t in normal) == Counter(
                passed=3 * len(normal) - 3, failed=3
            )

            # --- injected faults: retried, then `error` with the cause; none passes
            for fault, cause in FAULTS.items():
                for judge_id in LLM_JUDGES:
                    v = pairs[(f"fault-{fault}", judge_id)][0]
                    assert v["result"] == "error", v
                    assert v["reason"].startswith(f"{cause}: ")
                    assert v["attempts"] >= 3  # the retry budget was spent
                assert results[(f"fault-{fault}", "no_apology")] == "passed"  # no model needed
            stats = http_json(standin_url + "/stats")
            assert stats["fault_429"] >= 6 and stats["fault_500"] >= 6
            assert stats["fault_hang"] >= 6 and stats["fault_malformed"] >= 6
            assert 4 <= stats["max_in_flight"] <= 8  # many calls at once, bounded per worker
            assert {base64_key(d) for _, d, _ in dead} == {"bad-1", "bad-2"}
            assert {d["reason"] for _, d, _ in dead} == {"invalid_json", "unknown_scenario"}

            # --- a replay of the same transcripts (new trial ids): served from the cache
            http_json(standin_url + "/stats/reset", method="POST")
            replay = {
                f"re-{t}": c.model_copy(update={"trial_id": f"re-{t}", "event_id": f"cf-re-{t}"})
                for t, c in normal.items()
            }
            produce(
                settings,
                Topic.CONVERSATION_FINISHED,
                [(c.session_id, encode(c)) for c in replay.values()],
            )
            pairs = wait_for(
                lambda: graded(settings, list(replay)),
                timeout=60,
                what="verdicts for the replayed trials",
            )
            assert http_json(standin_url + "/stats").get("requests", 0) == 0  # no model call
            for trial_id in replay:
                for judge_id in LLM_JUDGES:
                    v = pairs[(trial_id, judge_id)][0]
                    assert v["cached"] is True
                    assert v["result"] == results[(trial_id.removeprefix("re-"), judge_id)]
            assert metric(metrics_port, "passk_judge_cache_hits_total") == 2 * len(replay)

        # --- the model goes away: trials are held (not errored), then the backlog drains
        backlog = {f"late-{i}": trial(f"late-{i}", f"(late {i})") for i in range(4)}
        produce(
            settings,
            Topic.CONVERSATION_FINISHED,
            [(c.session_id, encode(c)) for c in backlog.values()],
        )
        wait_for(
            lambda: metric(metrics_port, "passk_judge_model_outage") == 1,
            timeout=60,
            what="the worker to notice the outage",
        )
        assert not any(t in backlog for t, _ in verdicts_by_pair(settings))
        with running(standin_args, env, log, ready=lambda: answering(standin_url)):
            pairs = wait_for(
                lambda: graded(settings, list(backlog)), timeout=90, what="the backlog to drain"
            )
    late = [vs[0] for (t, _), vs in pairs.items() if t in backlog]
    assert len(late) == 3 * len(backlog)
    assert all(v["result"] == "passed" for v in late), [v["reason"] for v in late]


def base64_key(dead_letter: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(dead_letter["key_b64"]).decode()


@pytest.mark.postgres
class TestPostgresCache(CacheContract):
    """The judge cache on PostgreSQL (skipped without PASSK_TEST_POSTGRES_URL)."""

    @pytest.fixture
    def url(self) -> Iterator[str]:
        from tests.integration.test_store_postgres import fresh_schema, postgres_url

        with fresh_schema(postgres_url()) as url:
            yield url
