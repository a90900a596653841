"""The queues' candidates as the app reads them from a real (SQLite) projection: the most
recent trials newest first, their judge rows, and the gates as the verdict recorded them."""

from __future__ import annotations

from pathlib import Path

from services.review.app import candidates_from
from services.storage.store import Store
from tests.unit.storage import factories as f


def test_recent_trials_newest_first_with_their_judges_and_gates(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    assert store.recent_trials(10) == [] and store.judges_of(["x"]) == []
    both = ["gate:exit", "gate:state"]
    store.apply(f.verdict("old", "passed", when=1).model_copy(update={"checks_passed": both}))
    store.apply(f.verdict("new", "failed", when=3))  # its state gate failed
    store.apply(
        f.verdict(
            "mid", "failed", run_id="run-2", when=2, failed=[("judge:polite", "rude")]
        ).model_copy(update={"checks_passed": both})
    )
    store.apply(f.judge("mid", "polite", "failed", run_id="run-2"))
    store.apply(f.judge("new", "polite", "passed"))
    store.apply(f.judge("new", "aaa", "error"))

    assert [t.trial_id for t in store.recent_trials(10)] == ["new", "mid", "old"]
    assert [t.trial_id for t in store.recent_trials(2)] == ["new", "mid"]
    assert [(j.trial_id, j.judge_id) for j in store.judges_of(["new", "mid"])] == [
        ("mid", "polite"),
        ("new", "aaa"),
        ("new", "polite"),
    ]

    found = {c.trial_id: c for c in candidates_from(store)}
    assert (found["old"].gates_passed, found["old"].state_failed, found["old"].judges) == (
        True,
        False,
        (),
    )
    assert (found["mid"].gates_passed, found["mid"].state_failed) == (True, False)
    assert (found["new"].gates_passed, found["new"].state_failed) == (False, True)
    assert [j.judge_id for j in found["new"].llm_judges] == ["polite"]  # the error is not
    store.close()
