"""`passk calibrate` plans a scenario's LLM user checks too (judge id `user:<id>`, set
`user:<id>.jsonl`), grades each item over the user's view as production does, and the
calibration it makes is the one the verdict's gating reads for that user check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from schemas.events import ConversationFinished, Message
from schemas.scenario import JudgeSpec, Scenario
from services.calibration.calibrate import plan_judges, run
from services.calibration.sets import load_sets
from services.grading.calibration import Bar, CalibrationBook, GatingPolicy
from services.judge.domain import CallResult
from services.judge.grading import Grader
from services.judge.prompt import Answer

ASSERTION = "The user answered as the customer, never as the assistant."
SCENARIO = Scenario(
    id="find-the-order",
    expected_exit=["product_closed"],
    judges=[JudgeSpec(id="polite", assertion="The assistant was polite.")],
    user={"persona": "A customer who lost an order number.", "instructions": "Shoes, Tuesday."},
    user_checks=[
        JudgeSpec(id="stayed_in_role", assertion=ASSERTION),
        JudgeSpec(id="no_code", kind="regex", role="user", pattern="E-[0-9]+", must_match=False),
    ],
).versioned()
BROKE_ROLE = "Hello! How can I help you today?"


class FakeModel:
    """Fails the user check when the user's first turn is the assistant's greeting; keeps
    every transcript it was sent."""

    def __init__(self) -> None:
        self.seen: dict[str, list[Message]] = {}

    async def judge(self, judge_id: str, assertion: str, transcript: list[Message]) -> CallResult:
        first_user = next(m.content for m in transcript if m.role == "user")
        self.seen[first_user] = transcript
        broke = first_user == BROKE_ROLE
        return CallResult(
            answer=Answer(passed=not broke, reason="in role" if not broke else "greeted"),
            cause=None, detail="", attempts=1, latency_ms=1.0, input_tokens=10,
            output_tokens=2, model="m",
        )  # fmt: skip


def transcript(first_user: str, i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "the product's own prompt"},
        {"role": "user", "content": first_user},
        {"role": "tool", "content": f"lookup {i}"},
        {"role": "assistant", "content": "Which order?"},
    ]


def test_an_llm_user_check_is_planned_under_its_user_id_and_deterministic_ones_are_not() -> None:
    plan = plan_judges([SCENARIO])
    assert set(plan.judges) == {"polite", "user:stayed_in_role"}
    [planned] = plan.judges["user:stayed_in_role"]
    assert planned.user_check and planned.spec.assertion == ASSERTION
    assert not plan.judges["polite"][0].user_check


def test_a_user_checks_set_calibrates_the_version_its_verdicts_carry(tmp_path: Path) -> None:
    # 12 labelled conversations: 5 where the user greeted like the assistant (the human
    # says fail), 1 of those the human calls fine, 6 where the user stayed the customer
    broke = [(BROKE_ROLE, "fail")] * 5 + [(BROKE_ROLE, "pass")]
    kept = [(f"I lost my order {i}.", "pass") for i in range(6)]
    items = broke + kept
    folder = tmp_path / "sets"
    folder.mkdir()
    (folder / "user:stayed_in_role.jsonl").write_text(
        "".join(
            json.dumps({"id": f"item-{i}", "label": label, "transcript": transcript(first, i)})
            + "\n"
            for i, (first, label) in enumerate(items)
        )
    )
    sets, problems = load_sets(folder)
    assert problems == [] and [s.judge_id for s in sets] == ["user:stayed_in_role"]
    model = FakeModel()
    grader = Grader(client=model, cache=None, metrics=None, model="m")  # type: ignore[arg-type]
    results, problems = asyncio.run(
        run(
            sets,
            plan_judges([SCENARIO]),
            grader,
            bar=Bar(),
            prompt_hash="p",
            transcript_of=lambda trial_id: None,
        )
    )
    assert problems == []
    [result] = results
    c = result.calibration
    # the matrix, counted here: the model fails exactly the greetings (positive = failed)
    expected = {"tp": 5, "fp": 1, "fn": 0, "tn": 6}
    assert {k: getattr(c, k) for k in expected} == expected
    assert c.judge_id == "user:stayed_in_role" and c.n == len(items)
    # the model read the user's view: the persona first, no tool message
    for sent in model.seen.values():
        assert sent[0].role == "system" and SCENARIO.user is not None
        assert SCENARIO.user.persona in sent[0].content
        assert SCENARIO.user.instructions in sent[0].content
        assert [m.role for m in sent[1:]] == ["user", "assistant"]
    # the version is the one a production verdict of this user check carries, so the
    # verdict's gating finds it: advisory before, gating after (precision 5/6 >= 0.8)
    trial = ConversationFinished(
        event_id="e", run_id="r", scenario_id=SCENARIO.id, trial_id="t", session_id="s",
        exit_reason="product_closed",
        transcript=[Message(role="user", content=BROKE_ROLE)],
    )  # fmt: skip
    live = {v.judge_id: v for v in asyncio.run(grader.grade_user(trial, SCENARIO))}
    version = live["user:stayed_in_role"].judge_version
    assert c.judge_version == version
    spec = SCENARIO.user_checks[0]
    policy = GatingPolicy()
    assert policy.gates(spec, version, CalibrationBook().get(version))[0] is False
    assert policy.gates(spec, version, CalibrationBook([c]).get(version))[0] is True
