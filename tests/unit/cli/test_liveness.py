"""A worker that is not running is shown as down, whatever its restart count says."""

from __future__ import annotations

import pytest

from services.cli.liveness import (
    JOIN_GRACE_S,
    down_reason,
    pid_alive,
    stall_reason,
    supervisor_states,
)
from services.cli.status import ProcessorStatus


@pytest.mark.parametrize(
    ("supervisor", "known", "members", "down"),
    [
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
    ],
)
def test_down_reason(supervisor: str | None, known: bool, members: int, down: str | None) -> None:
    assert down_reason(supervisor_state=supervisor, group_known=known, members=members) == down


def test_down_outranks_degraded_and_restarts_in_what_status_shows() -> None:
    dead = ProcessorStatus(
        "gate", "g", "Empty", 0, 3, restarts=4, degraded=("broker",), down="supervisor says FATAL"
    )
    assert dead.health == "DOWN: supervisor says FATAL" and not dead.ready
    assert ProcessorStatus("gate", "g", "Stable", 1, 0, degraded=("store",)).health == (
        "degraded: store down"
    )
    assert ProcessorStatus("gate", "g", "Stable", 1, 0).health == "ok"
    # red-team re-run: a group already empty, inside the join grace, read "ok"
    assert ProcessorStatus("gate", "g", "Empty", 0, 3).health == (
        "not ready: no member in its group"
    )
    assert ProcessorStatus("gate", "g", "PreparingRebalance", 1, 0).health == (
        "not ready: group PreparingRebalance"
    )


def test_no_supervisord_listening_is_no_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert supervisor_states(tmp_path / "supervisor.sock") is None
    (tmp_path / "stale.sock").write_text("")  # a socket file left behind, nobody listening
    assert supervisor_states(tmp_path / "stale.sock") is None


# Issue 21, item 6: a hung worker must not look healthy.
@pytest.mark.parametrize(
    ("supervisor", "up_s", "down"),
    [
        ("RUNNING", 5.0, None),  # just started: joining
        ("RUNNING", None, None),  # no health file here: it may run elsewhere
        (
            "RUNNING",
            JOIN_GRACE_S + 1,
            "no member in its consumer group 121 s after its start "
            "(its process runs: hung, or it cannot join)",
        ),
        ("STARTING", JOIN_GRACE_S + 1, None),
    ],
)
def test_a_running_worker_long_absent_from_its_group_is_down(
    supervisor: str, up_s: float | None, down: str | None
) -> None:
    assert down_reason(supervisor_state=supervisor, group_known=True, members=0, up_s=up_s) == down
    # with a member, the start time says nothing
    assert down_reason(supervisor_state=supervisor, group_known=True, members=1, up_s=up_s) is None


@pytest.mark.parametrize(
    ("health", "alive", "stalled"),
    [
        ({"pid": 7, "beat_at": 1000.0}, True, None),  # 20 s: within the bound
        (
            {"pid": 7, "beat_at": 960.0},
            True,
            "no heartbeat for 60 s from pid 7, which is alive (stopped or hung)",
        ),
        ({"pid": 7, "beat_at": 960.0}, False, None),  # gone: its supervisor and group tell
        ({"pid": 7}, True, None),  # starting: no heartbeat yet
        (None, True, None),
    ],
)
def test_a_live_process_without_a_heartbeat_is_stalled(
    health: dict | None, alive: bool, stalled: str | None
) -> None:  # type: ignore[type-arg]
    assert stall_reason(health, 1020.0, 30.0, lambda pid: alive) == stalled


def test_pid_alive_knows_this_process_and_not_a_free_pid() -> None:
    import os

    assert pid_alive(os.getpid())
    assert not pid_alive(2**22 + 12345)  # above pid_max on Linux


def test_only_a_ready_worker_with_nothing_wrong_is_healthy() -> None:
    assert ProcessorStatus("gate", "g", "Stable", 1, 0).healthy
    assert not ProcessorStatus("gate", "g", "Stable", 1, 0, degraded=("store",)).healthy
    stalled = ProcessorStatus("judge", "g", "Stable", 1, 40, stalled="no heartbeat for 60 s")
    assert not stalled.healthy and stalled.health == "stalled: no heartbeat for 60 s"
    assert not ProcessorStatus("gate", "g", "Empty", 0, 0).healthy
