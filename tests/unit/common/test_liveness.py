"""A worker that is not running is shown as down, whatever its restart count says."""

from __future__ import annotations

import pytest

from services.common.liveness import down_reason, supervisor_states
from services.common.status import ProcessorStatus


@pytest.mark.parametrize(("supervisor", "known", "members", "down"), [
    ("RUNNING", True, 1, None),
    (None, True, 1, None),  # no supervisord here: the group answers for it
    ("FATAL", True, 0, "supervisor says FATAL"),
    ("BACKOFF", True, 0, "supervisor says BACKOFF"),
    ("EXITED", True, 1, "supervisor says EXITED"),  # the group has not noticed yet
    ("STOPPED", False, 0, "supervisor says STOPPED"),  # even with the broker down
    (None, True, 0, "no member in its consumer group"),
    ("RUNNING", True, 0, None),  # running, joining its group: not ready, not down
    ("STARTING", True, 0, None),
    (None, False, 0, None),  # broker down, no supervisor: unknown, not called down
])
def test_down_reason(supervisor: str | None, known: bool, members: int, down: str | None) -> None:
    assert down_reason(supervisor_state=supervisor, group_known=known, members=members) == down


def test_down_outranks_degraded_and_restarts_in_what_status_shows() -> None:
    dead = ProcessorStatus("gate", "g", "Empty", 0, 3, restarts=4, degraded=("broker",),
                           down="supervisor says FATAL")
    assert dead.health == "DOWN: supervisor says FATAL" and not dead.ready
    assert ProcessorStatus("gate", "g", "Stable", 1, 0, degraded=("store",)).health == (
        "degraded: store down")
    assert ProcessorStatus("gate", "g", "Stable", 1, 0).health == "ok"


def test_no_supervisord_listening_is_no_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert supervisor_states(tmp_path / "supervisor.sock") is None
    (tmp_path / "stale.sock").write_text("")  # a socket file left behind, nobody listening
    assert supervisor_states(tmp_path / "stale.sock") is None
