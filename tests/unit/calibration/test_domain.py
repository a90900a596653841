"""The calibration processor's join and fold, pure."""

from __future__ import annotations

from schemas.events import JudgeCalibration, Label
from services.calibration import domain
from services.grading.calibration import Bar, Matrix, calibration_event
from tests.unit.factories import judge_verdict


def label(trial: str, passed: bool, event_id: str | None = None) -> Label:
    return Label(
        event_id=event_id or f"l-{trial}-{passed}", trial_id=trial, judge_id="j", passed=passed
    )


def verdict(trial: str, result: str):  # type: ignore[no-untyped-def]
    return judge_verdict("j", result, trial=trial).model_copy(update={"judge_version": "v1"})


def test_a_label_waits_for_its_verdict_and_is_joined_once() -> None:
    state = domain.on_label(None, label("t1", True))
    assert domain.ready_joins("t1", state) == []
    state = domain.on_verdict(state, verdict("t1", "failed"))
    joins = domain.ready_joins("t1", state)
    assert [(j.judge_result, j.label, j.judge_version) for j in joins] == [("failed", "pass", "v1")]
    state = domain.joined(state, joins)
    assert domain.ready_joins("t1", state) == []  # redelivered verdict or label: nothing new
    assert domain.ready_joins("t1", domain.on_label(state, label("t1", True))) == []
    relabelled = domain.on_label(state, label("t1", False))
    assert [j.label for j in domain.ready_joins("t1", relabelled)] == ["fail"]


def base(cells: tuple[int, int, int, int]) -> JudgeCalibration:
    m = Matrix(tp=cells[0], fp=cells[1], fn=cells[2], tn=cells[3])
    return calibration_event(
        judge_id="j",
        version="v1",
        matrix=m,
        bar=Bar(),
        source="set",
        assertion="a",
        prompt_hash="p",
        model="m",
        dimension=None,
        event_id="set-1",
    )


def fold(state, trial: str, result: str, human: str):  # type: ignore[no-untyped-def]
    s = domain.on_label(None, label(trial, human == "pass"))
    s = domain.on_verdict(s, verdict(trial, result))
    (item,) = domain.ready_joins(trial, s)
    return domain.on_labelled(state, item, Bar())


def test_production_labels_fold_into_the_set_matrix_once_each() -> None:
    state, out = domain.on_set_calibration(None, base((5, 0, 0, 5)), Bar())
    assert out is None
    state, c = fold(state, "t1", "failed", "pass")  # a production false positive
    assert c is not None and (c.tp, c.fp, c.fn, c.tn, c.n) == (5, 1, 0, 5, 11)
    assert c.source == "labels" and c.gating is True
    again, repeat = fold(state, "t1", "failed", "pass")
    assert repeat is None and again == state  # the same label twice counts once
    state, c = fold(state, "t2", "passed", "fail")  # a production false negative
    assert c is not None and (c.tp, c.fp, c.fn, c.tn) == (5, 1, 1, 5)
    state, c = fold(state, "t1", "failed", "fail")  # the human changed their mind
    assert c is not None and (c.tp, c.fp, c.fn, c.tn) == (6, 0, 1, 5)


def test_a_new_set_calibration_rebases_the_running_matrix() -> None:
    state, _ = domain.on_set_calibration(None, base((5, 0, 0, 5)), Bar())
    state, _ = fold(state, "t1", "failed", "pass")
    newer = base((2, 3, 0, 5)).model_copy(update={"event_id": "set-2"})
    state, c = domain.on_set_calibration(state, newer, Bar())
    assert c is not None and (c.tp, c.fp, c.fn, c.tn) == (2, 4, 0, 5) and c.gating is False
    same, none = domain.on_set_calibration(state, newer, Bar())
    assert none is None and same == state
    ours = c.model_copy(update={"source": "labels"})
    assert domain.on_set_calibration(state, ours, Bar()) == (state, None)


def test_running_calibration_ids_are_deterministic() -> None:
    a, c1 = fold(
        domain.on_set_calibration(None, base((5, 0, 0, 5)), Bar())[0], "t1", "failed", "pass"
    )
    b, c2 = fold(
        domain.on_set_calibration(None, base((5, 0, 0, 5)), Bar())[0], "t1", "failed", "pass"
    )
    assert c1 is not None and c2 is not None and c1.event_id == c2.event_id
