"""Confusion matrices, the bar and who may fail a trial: table-driven, no broker."""

from __future__ import annotations

import pytest

from schemas.scenario import JudgeSpec
from services.grading.calibration import (
    Bar,
    CalibrationBook,
    GatingPolicy,
    Matrix,
    calibration_event,
    decide,
    judge_version,
)


def matrix(tp: int, fp: int, fn: int, tn: int, errors: int = 0) -> Matrix:
    m = Matrix()
    for result, label, count in (
        ("failed", "fail", tp),
        ("failed", "pass", fp),
        ("passed", "fail", fn),
        ("passed", "pass", tn),
        ("error", "pass", errors),
    ):
        for _ in range(count):
            m = m.add(result, label)  # type: ignore[arg-type]
    return m


@pytest.mark.parametrize(
    ("cells", "precision", "recall"),
    [
        ((11, 2, 1, 6), 11 / 13, 11 / 12),  # the method's example: 0.85 and 0.92
        ((5, 0, 0, 5), 1.0, 1.0),
        ((0, 0, 3, 7), None, 0.0),  # never flags: precision undefined
        ((0, 4, 0, 6), 0.0, None),  # nothing truly failing: recall undefined
        ((6, 4, 0, 5), 0.6, 1.0),
    ],
)
def test_precision_and_recall(
    cells: tuple[int, int, int, int], precision: float | None, recall: float | None
) -> None:
    m = matrix(*cells)
    assert (m.tp, m.fp, m.fn, m.tn) == cells and m.n == sum(cells)
    assert m.precision == (pytest.approx(precision) if precision is not None else None)
    assert m.recall == (pytest.approx(recall) if recall is not None else None)


def test_errors_are_counted_apart() -> None:
    m = matrix(5, 0, 0, 5, errors=2)
    assert (m.tp, m.fp, m.fn, m.tn, m.errors, m.n) == (5, 0, 0, 5, 2, 12)
    assert m.precision == 1.0


@pytest.mark.parametrize(
    ("cells", "errors", "gates", "why"),
    [
        ((11, 2, 1, 6), 0, True, "precision 0.85 >= 0.80 on 20 labels"),
        ((8, 2, 0, 0), 0, True, "precision 0.80 >= 0.80 on 10 labels"),  # exactly the bar
        ((6, 4, 0, 5), 0, False, "below the bar: precision 0.60 < 0.80"),
        ((3, 0, 0, 3), 0, False, "too few labels: 6 < 10"),
        ((0, 0, 2, 9), 0, False, "precision unknown: the judge flagged no item of the set"),
        ((6, 0, 0, 6), 1, False, "incomplete: the judge errored on 1 of 13 items"),
    ],
)
def test_the_bar(cells: tuple[int, int, int, int], errors: int, gates: bool, why: str) -> None:
    assert decide(matrix(*cells, errors=errors), Bar(0.8, 10)) == (gates, why)


def test_a_judge_version_changes_with_each_of_its_four_parts() -> None:
    base = judge_version("j", "The agent was polite.", "p1", "m1")
    assert judge_version("j", "  The agent was polite.\n", "p1", "m1") == base
    others = {
        judge_version("k", "The agent was polite.", "p1", "m1"),
        judge_version("j", "The agent was rude.", "p1", "m1"),
        judge_version("j", "The agent was polite.", "p2", "m1"),
        judge_version("j", "The agent was polite.", "p1", "m2"),
    }
    assert base not in others and len(others) == 4


def calibrated(version: str, cells: tuple[int, int, int, int]) -> CalibrationBook:
    return CalibrationBook(
        [
            calibration_event(
                judge_id="j",
                version=version,
                matrix=matrix(*cells),
                bar=Bar(),
                source="set",
                assertion="a",
                prompt_hash="p",
                model="m",
                dimension=None,
                event_id=f"c-{cells}",
            )
        ]
    )


LLM = JudgeSpec(id="j", assertion="a")


@pytest.mark.parametrize(
    ("spec", "version", "book", "uncalibrated", "gates", "why"),
    [
        (LLM, "v1", CalibrationBook(), "advisory", False, "uncalibrated"),
        (
            LLM,
            "v1",
            CalibrationBook(),
            "gating",
            True,
            "uncalibrated (PASSK_UNCALIBRATED_JUDGES=gating)",
        ),
        (
            LLM,
            "v1",
            calibrated("v1", (11, 2, 1, 6)),
            "advisory",
            True,
            "precision 0.85 >= 0.80 on 20 labels",
        ),
        (
            LLM,
            "v1",
            calibrated("v1", (6, 4, 0, 5)),
            "gating",
            False,
            "below the bar: precision 0.60 < 0.80",
        ),
        # a new version (another assertion, prompt or model) starts uncalibrated
        (LLM, "v2", calibrated("v1", (11, 2, 1, 6)), "advisory", False, "uncalibrated"),
        (
            JudgeSpec(id="j", assertion="a", gating=False),
            "v1",
            calibrated("v1", (11, 2, 1, 6)),
            "gating",
            False,
            "gating: false in the scenario",
        ),
        (
            JudgeSpec(id="r", kind="regex", pattern="x"),
            None,
            CalibrationBook(),
            "advisory",
            True,
            "deterministic (regex)",
        ),
    ],
)
def test_who_may_fail_a_trial(
    spec: JudgeSpec,
    version: str | None,
    book: CalibrationBook,
    uncalibrated: str,
    gates: bool,
    why: str,
) -> None:
    policy = GatingPolicy(bar=Bar(), uncalibrated=uncalibrated)  # type: ignore[arg-type]
    assert policy.gates(spec, version, book.get(version)) == (gates, why)


def test_the_latest_calibration_of_a_version_wins() -> None:
    book = calibrated("v1", (11, 2, 1, 6))
    book.apply(next(iter(calibrated("v1", (6, 4, 0, 5)).all().values())))
    assert GatingPolicy().gates(LLM, "v1", book.get("v1"))[0] is False
