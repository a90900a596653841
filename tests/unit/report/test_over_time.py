"""The windows view: judged figures, the alert condition as the drop rule asks it, and the
projection keeping the newest record of each window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from math import comb
from pathlib import Path

import pytest

from schemas.events import ScenarioReliability
from services.grading.estimators import ReliabilityTally
from services.report.over_time import alert_condition, view, views
from services.storage.records import window_record
from services.storage.store import Store
from tests.unit.storage import factories as f

HOUR = datetime(2026, 11, 30, 10, tzinfo=UTC)


def record(
    seq: int, passed: int, failed: int = 0, errors: int = 0, *, start: datetime = HOUR
) -> ScenarioReliability:
    return f.window(seq, passed, failed, errors, start=start)


@pytest.mark.parametrize(
    ("passed", "failed", "errors", "held"),
    [
        (3, 9, 0, True),  # a real drop: 3 of 12 passed (upper 0.12)
        (12, 0, 0, False),  # healthy
        (9, 1, 0, False),  # one miss in ten: upper 0.90
        (1, 3, 0, False),  # confidently bad, but only 4 trials
        (3, 0, 9, False),  # a judge outage: 9 of 12 could not be judged
        (2, 4, 6, False),  # half errors: 6 judged, fewer than min_trials
        (1, 11, 13, False),  # 12 judged, all but one failed, but errors are most: the judge's
        (1, 11, 12, True),  # errors half, not most: the agent's
    ],
)
def test_the_alert_condition_is_asked_of_the_judged_trials(
    passed: int, failed: int, errors: int, held: bool
) -> None:
    tally = ReliabilityTally(k=3, passed=passed, failed=failed, errors=errors)
    assert alert_condition(tally, 0.8, 10) is held


def test_a_window_view_carries_errors_apart_and_the_judged_pass_hat_k() -> None:
    w = view(window_record(record(12, passed=3, errors=9)))  # type: ignore[arg-type]
    assert (w.n, w.passed, w.errors) == (12, 3, 9)
    assert w.pass_hat_k == pytest.approx(1 / comb(12, 3))
    assert w.judged_pass_hat_k == 1.0
    assert w.alert_condition is False


def test_the_projection_keeps_each_windows_newest_record(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    later = HOUR + timedelta(hours=1)
    # In one batch and out of order: seq 2 then seq 1 of the first window; a run record
    # (not kept); then a second window.
    run = record(5, passed=5).model_copy(
        update={
            "window": None,
            "window_start": None,
            "window_end": None,
            "run_id": "r1",
            "event_id": "reliability:s1:run:r1:5",
        }
    )
    store.apply_many([record(2, passed=2), record(1, passed=1), run])
    store.apply_many([record(1, passed=1)])  # a stale copy arriving late changes nothing
    store.apply_many(
        [record(1, passed=0, failed=1, start=later), record(2, passed=0, failed=2, start=later)]
    )
    rows = store.windows()
    assert [(r.window_start, r.seq, r.n) for r in rows] == [(HOUR, 2, 2), (later, 2, 2)]
    assert [r.window_start for r in store.windows(1)] == [later]
    assert views(store.windows(1))[0].failed == 2
    assert store.windows(size="1d") == []
    assert store.windows(scenarios=["other"]) == []
    store.close()


def test_a_sampled_window_shows_and_alerts_on_its_sampled_trials(tmp_path: Path) -> None:
    from services.report.over_time import windows_json

    # 40 trials (gates and deterministic checks: 36 passed); 12 sampled, 3 of them passed
    rec = record(40, passed=36, failed=4).model_copy(
        update={
            "n_sampled": 12,
            "passed_sampled": 3,
            "errors_sampled": 0,
            "alert_min_pass_hat_k": 0.8,
            "alert_min_trials": 10,
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    store.apply_many([rec])
    (w,) = views(store.windows())
    store.close()
    assert (w.n, w.passed, w.n_sampled, w.passed_sampled) == (40, 36, 12, 3)
    assert w.pass_hat_k_sampled == pytest.approx(comb(3, 3) / comb(12, 3))
    assert w.pass_hat_k_sampled_upper < 0.2 and w.alert_condition is True
    row = windows_json([w])["windows"][0]
    assert {
        "n_sampled",
        "passed_sampled",
        "pass_hat_k_sampled",
        "pass_hat_k_sampled_lower",
        "pass_hat_k_sampled_upper",
    } <= set(row)
    # 8 sampled: below min_trials, quiet whatever the figure
    few = rec.model_copy(update={"n_sampled": 8, "passed_sampled": 0})
    assert view(window_record(few)).alert_condition is False  # type: ignore[arg-type]
