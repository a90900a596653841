"""What ci starts it stops by process group: a child's own children too (kafka-up.sh's
broker outlives the script in its group), SIGKILL after the grace for one that ignores
SIGTERM, and nothing outside the groups it started. No broker here: plain processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from services.ci import stack as ci_stack
from services.ci.stack import Stack, Started, _keep_formatted, _place_formatted, stop_all
from services.contract.exits import Unreachable
from services.contract.settings import Settings


def _group(tmp_path: Path, name: str, script: str) -> Started:
    """A bash leader that leaves a sleeping child behind in its group, as kafka-up.sh
    leaves its broker; the child's pid in name.child."""
    log = tmp_path / f"{name}.log"
    child = tmp_path / f"{name}.child"
    popen = subprocess.Popen(
        ["bash", "-c", f"{script} & echo $! > {child}; wait"],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not (child.exists() and child.read_text().strip()):
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.02)
    return Started(name, popen, log)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stopping_a_group_stops_its_children_even_when_they_ignore_sigterm(tmp_path: Path) -> None:
    polite = _group(tmp_path, "polite", "sleep 300")
    stubborn = _group(tmp_path, "stubborn", "trap '' TERM; while :; do sleep 0.1; done")
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    children = [int((tmp_path / f"{n}.child").read_text()) for n in ("polite", "stubborn")]
    try:
        assert polite.group_alive() and stubborn.group_alive()
        began = time.monotonic()
        stop_all([polite, stubborn], grace_s=1.0)
        assert time.monotonic() - began < 8  # the grace, then SIGKILL: no long wait
        assert not polite.group_alive() and not stubborn.group_alive()
        assert not any(_alive(pid) for pid in children)
        assert bystander.poll() is None  # not ours: untouched
    finally:
        bystander.kill()
        bystander.wait()


def test_a_group_whose_leader_exited_is_alive_while_a_member_runs(tmp_path: Path) -> None:
    log = tmp_path / "leader.log"
    popen = subprocess.Popen(
        ["bash", "-c", "sleep 300 & echo started"],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    popen.wait(10)  # the script is done, as kafka-up.sh once the broker serves
    started = Started("kafka", popen, log)
    assert started.group_alive()
    stop_all([started], 0.0)
    assert not started.group_alive()


def test_a_worker_that_died_is_an_infrastructure_error_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "gate.log"
    log.write_text("line 1\nrefusing to start: not co-partitioned\n")
    dead = subprocess.Popen(["bash", "-c", "exit 3"], start_new_session=True)
    dead.wait(10)
    stack = Stack(settings=Settings(), env={}, workdir=tmp_path / "work")  # type: ignore[call-arg]
    stack.workers.append(Started("gate", dead, log))
    with pytest.raises(Unreachable, match="passk worker gate exited with 3") as caught:
        stack.check()
    assert "not co-partitioned" in str(caught.value)


def test_stop_removes_its_directory_and_gives_the_signal_handlers_back(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    member = _group(tmp_path, "worker", "sleep 300")
    stack = Stack(settings=Settings(), env={}, workdir=work, own_broker=True)  # type: ignore[call-arg]
    stack.workers.append(member)
    before = signal.getsignal(signal.SIGINT)
    stack.stop()
    assert not member.group_alive() and not work.exists()
    assert signal.getsignal(signal.SIGINT) == before  # held during the stop, given back
    assert "teardown_s" in stack.timings


def test_the_formatted_storage_is_kept_once_and_copied_for_the_next_broker(tmp_path: Path) -> None:
    first = tmp_path / "first" / "log"
    first.mkdir(parents=True)
    (first / "meta.properties").write_text("node.id=1\ncluster.id=abc\n")
    (first / "bootstrap.checkpoint").write_bytes(b"\x00\x01")
    template = tmp_path / "cache" / "kafka-9" / "ci-formatted"
    assert not _place_formatted(template, tmp_path / "none" / "log")  # nothing kept yet
    _keep_formatted(first, template)
    (first / "meta.properties").write_text("changed later\n")
    _keep_formatted(first, template)  # kept once: a later call changes nothing
    assert (template / "meta.properties").read_text() == "node.id=1\ncluster.id=abc\n"
    second = tmp_path / "second" / "log"
    assert _place_formatted(template, second)
    assert (second / "bootstrap.checkpoint").read_bytes() == b"\x00\x01"
    assert ci_stack.FORMATTED == ("meta.properties", "bootstrap.checkpoint")


def test_a_ctrl_c_while_stopping_does_not_cut_the_stopping_short() -> None:
    held = ci_stack._hold_signals()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # ignored while held: no KeyboardInterrupt
        time.sleep(0.05)
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    assert set(held) == {signal.SIGINT, signal.SIGTERM}
