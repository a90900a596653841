"""A trial's judges graded through the real client, cache and metrics, against the stand-in."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from schemas.events import ConversationFinished, Message
from schemas.scenario import JudgeSpec, Scenario
from services.judge.cache import VerdictCache
from services.judge.client import JudgeClient, RetryPolicy
from services.judge.grading import Grader
from services.judge.metrics import JudgeMetrics
from services.storage.db import engine_for
from tests.unit.factories import conversation
from tests.unit.judge.conftest import StartStandin, standin_stats

SCENARIO = Scenario(
    id="debrief",
    expected_exit=["product_closed"],
    judges=[
        JudgeSpec(id="asked_parts", assertion="The agent asked which parts were used."),
        JudgeSpec(id="asked_tests", assertion="The agent asked which tests were run."),
        JudgeSpec(id="no_apology", kind="regex", pattern="(?i)sorry", must_match=False),
    ],
).versioned()


def trial(trial_id: str, *text: str) -> ConversationFinished:
    return conversation(
        trial_id,
        run_id="r",
        scenario_id="debrief",
        transcript=[
            Message(role="user", content="Done."),
            Message(role="assistant", content=" ".join(("Which parts?", *text))),
        ],
    )


def grader(
    url: str, tmp_path: Path, registry: CollectorRegistry, *, lookups: bool = True
) -> Grader:
    metrics = JudgeMetrics(registry)
    client = JudgeClient(
        model="gpt-4o-mini",
        base_url=url,
        api_key="standin",
        timeout_s=5,
        concurrency=4,
        policy=RetryPolicy(max_retries=1, base_delay_s=0.01),
        metrics=metrics,
    )
    cache = VerdictCache(engine_for(f"sqlite:///{tmp_path / 'judge.db'}"), lookups=lookups)
    cache.create()
    return Grader(client=client, cache=cache, metrics=metrics, model="gpt-4o-mini")


async def test_replay_is_served_from_the_cache(standin: StartStandin, tmp_path: Path) -> None:
    url = await standin()
    registry = CollectorRegistry()
    g = grader(url, tmp_path, registry)
    first = await g.grade(trial("t1", "[[fail:asked_tests]]"), SCENARIO)
    assert [(v.judge_id, v.result, v.cached) for v in first] == [
        ("asked_parts", "passed", False),
        ("asked_tests", "failed", False),
        ("no_apology", "passed", False),
    ]
    assert (await standin_stats(url))["requests"] == 2  # the regex judge made no call

    again = await g.grade(trial("t2", "[[fail:asked_tests]]"), SCENARIO)  # same transcript
    assert [(v.result, v.cached) for v in again] == [
        ("passed", True),
        ("failed", True),
        ("passed", False),
    ]
    assert all(v.trial_id == "t2" for v in again)
    assert (await standin_stats(url))["requests"] == 2  # zero model calls
    sample = registry.get_sample_value
    assert sample("passk_judge_cache_hits_total", {"judge": "asked_parts"}) == 1
    assert sample("passk_judge_cache_hits_total", {"judge": "asked_tests"}) == 1
    assert sample("passk_judge_verdicts_total", {"judge": "asked_tests", "result": "failed"}) == 2
    assert sample("passk_judge_verdicts_total", {"judge": "no_apology", "result": "passed"}) == 2
    assert sample("passk_judge_request_seconds_count") == 2
    assert sample("passk_judge_tokens_total", {"judge": "asked_parts", "kind": "input"}) > 0
    assert sample("passk_judge_tokens_total", {"judge": "asked_parts", "kind": "output"}) > 0

    forced = grader(url, tmp_path, CollectorRegistry(), lookups=False)  # PASSK_JUDGE_CACHE=0
    await forced.grade(trial("t3", "[[fail:asked_tests]]"), SCENARIO)
    assert (await standin_stats(url))["requests"] == 4


async def test_errors_are_never_cached_and_are_counted(
    standin: StartStandin, tmp_path: Path
) -> None:
    url = await standin()
    registry = CollectorRegistry()
    g = grader(url, tmp_path, registry)
    for trial_id in ("t1", "t2"):
        verdicts = await g.grade(trial(trial_id, "[[standin:malformed]]"), SCENARIO)
        llm = [v for v in verdicts if v.judge_kind == "llm"]
        assert [v.result for v in llm] == ["error", "error"]
        assert all(v.reason.startswith("malformed_answer: ") and v.attempts == 2 for v in llm)
    stats = await standin_stats(url)
    assert stats["fault_malformed"] == 8  # asked again on the replay: nothing was cached
    sample = registry.get_sample_value
    assert (
        sample("passk_judge_errors_total", {"judge": "asked_parts", "cause": "malformed_answer"})
        == 4
    )
    assert sample("passk_judge_verdicts_total", {"judge": "asked_parts", "result": "error"}) == 2


async def test_without_a_model_llm_judges_error_and_deterministic_ones_run() -> None:
    g = Grader(client=None, cache=None, metrics=None, model="gpt-4o-mini")
    verdicts = await g.grade(trial("t1"), SCENARIO)
    assert [v.result for v in verdicts] == ["error", "error", "passed"]


async def test_regrading_after_an_unrelated_change_makes_no_call(
    standin: StartStandin, tmp_path: Path
) -> None:
    url = await standin()
    g = grader(url, tmp_path, CollectorRegistry())
    await g.grade(trial("t1"), SCENARIO)
    edited = SCENARIO.model_copy(
        update={"description": "an unrelated edit", "version": None}
    ).versioned()
    assert edited.version != SCENARIO.version
    verdicts = await g.grade(trial("t1"), edited)
    assert all(v.cached for v in verdicts if v.judge_kind == "llm")
    assert {v.scenario_version for v in verdicts} == {edited.version}
    assert (await standin_stats(url))["requests"] == 2  # only the first grading asked


async def test_skip_when_gates_fail_asks_no_model_and_records_skipped(
    standin: StartStandin, tmp_path: Path
) -> None:
    url = await standin()
    registry = CollectorRegistry()
    g = grader(url, tmp_path, registry, lookups=False)
    skipped = await g.grade_after_gates(trial("t1", "sorry"), SCENARIO, ["state"])
    # The regex judge costs nothing and still runs; the two LLM judges are not asked.
    assert [(v.judge_id, v.result) for v in skipped] == [
        ("asked_parts", "skipped"),
        ("asked_tests", "skipped"),
        ("no_apology", "failed"),
    ]
    assert (await standin_stats(url)).get("requests", 0) == 0  # counters start at first use
    assert all(v.input_tokens is None and v.attempts == 0 for v in skipped)
    assert "gate:state already failed" in skipped[0].reason
    assert registry.get_sample_value("passk_judge_skipped_total", {"judge": "asked_parts"}) == 1
    # Gates passed: every judge asked, each call traced (tokens, latency, attempts, model).
    asked = await g.grade_after_gates(trial("t2"), SCENARIO, [])
    assert [v.result for v in asked] == ["passed", "passed", "passed"]
    assert (await standin_stats(url))["requests"] == 2
    for v in asked[:2]:
        assert v.input_tokens and v.output_tokens and v.attempts == 1 and not v.cached
        assert v.model == "passk-standin" and v.latency_ms and v.latency_ms > 0
    count = registry.get_sample_value("passk_judge_call_seconds_count", {"judge": "asked_parts"})
    assert count == 1
    tokens = registry.get_sample_value(
        "passk_judge_tokens_total", {"judge": "asked_parts", "kind": "input"}
    )
    assert tokens == asked[0].input_tokens


async def test_a_locked_store_never_holds_a_judgement_for_its_busy_timeout(
    standin: StartStandin, tmp_path: Path
) -> None:
    """Red-team re-run: another process held the SQLite file's write lock for 60 s; every
    cache lookup and write waited for the 30 s busy timeout, so a verdict took a minute and
    the verdict processor (PASSK_JUDGE_WAIT_S=45) made good trials `error`."""
    import asyncio
    import sqlite3
    import time

    from services.judge.grading import CACHE_WAIT_S

    g = grader(await standin(), tmp_path, CollectorRegistry())
    locker = sqlite3.connect(tmp_path / "judge.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        began = time.monotonic()
        verdicts = await asyncio.wait_for(
            asyncio.gather(*(g.grade(trial(f"t{i}"), SCENARIO) for i in range(4))), timeout=20
        )
        took = time.monotonic() - began
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert all(v.result == "passed" for vs in verdicts for v in vs)
    assert all(not v.cached for vs in verdicts for v in vs)
    # one bounded wait for the lookup and one for the write at most, never the 30 s timeout
    assert took < 4 * CACHE_WAIT_S + 5
    assert not g.store.up  # the outage is seen (degraded), not hidden


USER_SCENARIO = Scenario(
    id="debrief",
    expected_exit=["product_closed"],
    judges=[JudgeSpec(id="no_apology", kind="regex", pattern="(?i)sorry", must_match=False)],
    user={"persona": "A field technician.", "instructions": "The pump seized."},
    user_checks=[
        JudgeSpec(
            id="in_role", kind="regex", pattern="(?i)how can I help", must_match=False, role="user"
        ),
        JudgeSpec(id="stayed_in_persona", assertion="The user stayed in the persona."),
    ],
).versioned()


async def test_user_checks_judge_the_users_turns_against_its_persona(
    standin: StartStandin, tmp_path: Path
) -> None:
    url = await standin()
    g = grader(url, tmp_path, CollectorRegistry())
    spoiled = conversation(
        "t9",
        run_id="r",
        scenario_id="debrief",
        transcript=[
            Message(role="system", content="the product's own prompt"),
            Message(
                role="user",
                content="Hello! How can I help you today? [[fail:user:stayed_in_persona]]",
            ),
            Message(role="assistant", content="Which parts?"),
        ],
    )
    verdicts = {v.judge_id: v for v in await g.grade(spoiled, USER_SCENARIO)}
    assert set(verdicts) == {"no_apology", "user:in_role", "user:stayed_in_persona"}
    assert verdicts["no_apology"].result == "passed"  # the agent's judge sees the agent
    assert verdicts["user:in_role"].result == "failed"
    assert "user message" in verdicts["user:in_role"].reason
    # the LLM user check went to the model under its own id (the stand-in fails the id
    # whose marker the transcript it was sent holds)
    assert verdicts["user:stayed_in_persona"].result == "failed"
    assert verdicts["user:in_role"].event_id != verdicts["no_apology"].event_id
    fine = conversation(
        "t10",
        run_id="r",
        scenario_id="debrief",
        transcript=[
            Message(role="user", content="The pump seized."),
            Message(role="assistant", content="How can I help you further?"),
        ],
    )
    results = {v.judge_id: v.result for v in await g.grade(fine, USER_SCENARIO)}
    # the assistant saying it is not the user breaking role
    assert results == {
        "no_apology": "passed",
        "user:in_role": "passed",
        "user:stayed_in_persona": "passed",
    }
    # graded also when the gates failed (skip_when_gates_fail): a spoiled trial is invalid
    after = {
        v.judge_id: v.result for v in await g.grade_after_gates(spoiled, USER_SCENARIO, ["exit"])
    }
    assert after["user:in_role"] == "failed"


def test_the_user_view_starts_with_the_persona_and_keeps_only_the_two_speakers() -> None:
    from services.grading.user_checks import user_view

    seen = user_view(
        conversation(
            "t1",
            run_id="r",
            scenario_id="debrief",
            transcript=[
                Message(role="system", content="product prompt"),
                Message(role="user", content="Hi."),
                Message(role="tool", content="{}", tool_call_id="c1"),
                Message(role="assistant", content="Hello."),
            ],
        ),
        USER_SCENARIO,
    )
    assert [m.role for m in seen.transcript] == ["system", "user", "assistant"]
    head = seen.transcript[0].content or ""
    assert "A field technician." in head and "The pump seized." in head
    assert "product prompt" not in head


def test_a_regex_user_check_without_a_role_reads_the_users_turns() -> None:
    # a judge's regex defaults to the assistant's turns; as a user check that would book
    # the agent's words as the user's (an agent failure turned into an `invalid` trial)
    from services.grading.kinds import regex
    from services.grading.user_checks import user_check_specs, user_view

    scenario = Scenario(
        id="debrief",
        expected_exit=["product_closed"],
        user={"persona": "A field technician.", "instructions": "The pump seized."},
        user_checks=[JudgeSpec(id="in_role", kind="regex", pattern="(?i)how can I help",
                               must_match=False)],
    ).versioned()  # fmt: skip
    [spec] = user_check_specs(scenario)
    assert (spec.id, spec.params["role"]) == ("user:in_role", "user")
    trial = conversation(
        "t1",
        run_id="r",
        scenario_id="debrief",
        transcript=[
            Message(role="user", content="The pump seized."),
            Message(role="assistant", content="How can I help you further?"),
        ],
    )
    decision = regex(spec, user_view(trial, scenario).transcript)
    assert decision.passed, decision.reason  # the assistant's line is not the user's
    assert decision.reason == "/(?i)how can I help/ matched no user message, as required"


async def test_a_production_trial_outside_the_sample_asks_no_model(
    standin: StartStandin, tmp_path: Path
) -> None:
    from services.grading.sampling import in_sample

    url = await standin()
    registry = CollectorRegistry()
    g = grader(url, tmp_path, registry)
    sampled = (
        type(SCENARIO)
        .model_validate(
            {**SCENARIO.model_dump(exclude={"version"}), "sampling": {"llm_judges": 0.5}}
        )
        .versioned()
    )
    ids = [f"{i:032x}" for i in range(40)]
    out_id = next(t for t in ids if not in_sample(t, 0.5))
    in_id = next(t for t in ids if in_sample(t, 0.5))
    before = (await standin_stats(url)).get("requests", 0)
    out = await g.grade(trial(out_id).model_copy(update={"production": True}), sampled)
    assert [(v.judge_id, v.result) for v in out] == [
        ("asked_parts", "not_sampled"),
        ("asked_tests", "not_sampled"),
        ("no_apology", "passed"),
    ]
    assert (await standin_stats(url)).get("requests", 0) == before
    assert registry.get_sample_value("passk_judge_not_sampled_total", {"judge": "asked_parts"}) == 1
    # not a verdict of the model: a judge outage's error rate is not diluted by the sample
    assert not registry.get_sample_value(
        "passk_judge_verdicts_total", {"judge": "asked_parts", "result": "not_sampled"}
    )
    inside = await g.grade(trial(in_id).model_copy(update={"production": True}), sampled)
    assert {v.result for v in inside} == {"passed"}
    # a backfill (--sample 1.0) judges the one left out
    again = await g.grade(trial(out_id).model_copy(update={"production": True}), sampled, 1.0)
    assert {v.result for v in again} == {"passed"}
