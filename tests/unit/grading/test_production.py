"""The sample (the contract's hash) and the overlap rule."""

from __future__ import annotations

from hashlib import sha256

from schemas.events import ConversationFinished
from schemas.scenario import Scenario
from services.grading.production import can_overlap, choose, llm_judges_sampled, overlaps
from services.grading.sampling import in_sample


def test_in_sample_is_the_contracts_hash() -> None:
    ids = [f"{i:032x}" for i in range(2000)]
    for rate in (0.0, 0.1, 0.5, 1.0):
        want = {t for t in ids if int(sha256(t.encode("utf-8")).hexdigest()[:8], 16) < rate * 2**32}
        assert {t for t in ids if in_sample(t, rate)} == want
    assert not any(in_sample(t, 0.0) for t in ids) and all(in_sample(t, 1.0) for t in ids)
    small = {t for t in ids if in_sample(t, 0.1)}
    assert small <= {t for t in ids if in_sample(t, 0.5)}  # rates nest
    assert 120 < len(small) < 280


def _s(sid: str, match: dict | None, rate: float | None = None) -> Scenario:  # type: ignore[type-arg]
    body = {"id": sid, "expected_exit": "x", "match": match}
    if rate is not None:
        body["sampling"] = {"llm_judges": rate}
    return Scenario.model_validate(body)


def test_overlaps_are_found_with_the_winner_first() -> None:
    a = _s("a", {"service.name": "svc"})
    b = _s("b", {"service.name": "svc", "app.intent": ["refund"]})
    c = _s("c", {"service.name": "other"})
    d = _s("d", {"app.intent": ["return", "refund"]})
    assert [(w.id, lo.id) for w, lo in overlaps([a, b, c, d])] == [
        ("b", "a"),
        ("b", "d"),
        ("a", "d"),
        ("c", "d"),
    ]  # no shared key: c and d can overlap
    assert not can_overlap({"k": ["1"]}, {"k": ["2"]})
    assert choose([a, b, d], {"service.name": "svc", "app.intent": "refund"}) is b
    assert choose([a, d], {"service.name": "svc", "app.intent": "refund"}) is a  # tie: id


def test_only_production_trials_are_sampled_out() -> None:
    scenario = _s("a", {"service.name": "svc"}, 0.0)
    base = {
        "event_id": "e",
        "run_id": "r",
        "scenario_id": "a",
        "trial_id": "t",
        "session_id": "s",
        "exit_reason": "x",
        "transcript": [],
    }
    assert llm_judges_sampled(ConversationFinished(**base), scenario)
    prod = ConversationFinished(**base, production=True)
    assert not llm_judges_sampled(prod, scenario)
    assert llm_judges_sampled(prod, scenario, rate=1.0)  # a backfill's --sample


def test_validate_warns_about_matches_that_can_overlap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from services.grading.scenario_loader import validate_paths

    (tmp_path / "a.yaml").write_text("id: a\nexpected_exit: x\nmatch: {service.name: svc}\n")
    (tmp_path / "b.yaml").write_text(
        "id: b\nexpected_exit: x\nmatch: {service.name: svc, app.intent: [refund]}\n"
        "sampling: {llm_judges: 0.25}\n"
    )
    (tmp_path / "c.yaml").write_text("id: c\nexpected_exit: x\nmatch: {service.name: [other]}\n")
    result = validate_paths([tmp_path])
    assert result.ok, result.errors
    overlap = [w for w in result.warnings if w.field == "match"]
    assert len(overlap) == 1 and overlap[0].file.endswith("a.yaml")
    assert "'b'" in overlap[0].problem
    (tmp_path / "d.yaml").write_text("id: d\nexpected_exit: x\nsampling: {llm_judges: 1.5}\n")
    assert not validate_paths([tmp_path / "d.yaml"]).ok
