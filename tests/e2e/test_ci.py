"""`passk ci` as a CI job runs it, against the reference product (examples/agent/) with its
demo fault plan (two of the five follow-up trials lose the billing lines):

- nothing running: ci starts its own broker, workers and judge stand-in, exits 1, writes
  JUnit and Markdown that say so, leaves nothing running; a second ci with --baseline
  marks the scenario it made confidently worse;
- a broker already up (the shared one, this test's own topic prefix), one worker already
  running: the same answer, and neither the broker nor that worker is stopped;
- a scenario edited without publishing: `passk run` refuses it naming the file, `passk ci`
  grades the new version (its hash on every trial);
- SIGINT (and SIGTERM) in the middle: everything ci started is stopped, exit 130.

Every process ci starts inherits a mark in its environment: the test finds what is left
by that mark in /proc, never by name."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.contract.settings import Settings
from services.storage.store import Store
from tests.e2e.conftest import free_port
from tests.e2e.test_harness import reference_product, target
from tests.support import ROOT, isolated_env, running, stacks_of, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
SCENARIOS = ROOT / "examples" / "scenarios"
DEMO_FAULTS = json.loads((ROOT / "examples" / "agent" / "faults.demo.json").read_text())
FAILING = "debrief-follow-up-required"  # the demo plan's unreliable scenario
MARK = "PASSK_CI_TEST_MARK"


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment carries the mark."""
    found = []
    wanted = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            found.append((int(entry.name), cmd))
    return found


def cold_env(tmp_path: Path, mark: str) -> dict[str, str]:
    """Nothing answers at KAFKA_BOOTSTRAP_SERVERS; no model; the projection is the test's."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "OPENAI_", "PASSK_"))}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",
        PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
        PASSK_DATA_DIR=str(tmp_path / "data"),
        PASSK_SESSION_WAIT_S="15",
        TMPDIR=str(tmp_path / "tmp"),
        PYTHONUNBUFFERED="1",
        COLUMNS="200",
        **{MARK: mark},
    )
    return env


def ci(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "ci", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ci_args(scenarios: Path, target_file: Path, out: Path, run_id: str, *more: str) -> list[str]:
    return [
        "--scenarios",
        str(scenarios),
        "--target",
        str(target_file),
        "--run-id",
        run_id,
        "--trials",
        "5",
        "--junit",
        str(out / f"{run_id}.xml"),
        "--markdown",
        str(out / f"{run_id}.md"),
        "--json",
        *more,
    ]


def started_pids(stderr: str) -> list[int]:
    """The process groups ci says it started (`ci: started ... (pid N)` / `(process group
    N)`): each process it starts leads its own group."""
    pids = []
    for line in stderr.splitlines():
        if line.startswith("ci: started") and line.endswith(")"):
            pids.append(int(line.rsplit(" ", 1)[1].rstrip(")")))
    return pids


def gone(pid: int) -> bool:
    """No live process in the group `pid` leads (ci starts each process as a group leader;
    kafka-up.sh exits once the broker serves, its broker living on in its group)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pid and fields[0] != "Z":
            members.append(int(entry.name))
    return not members


def alive(pid: int) -> bool:
    """The process itself is running (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def check_junit(path: Path, run_id: str, failing: dict[str, str]) -> ET.Element:
    """The JUnit file parses; one testcase per example scenario; the failing ones (and
    only they) have a <failure> naming their check; the attributes add up."""
    root = ET.parse(path).getroot()
    [suite] = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {f.stem for f in SCENARIOS.glob("*.yaml")}
    assert {c.get("classname") for c in cases.values()} == {f"passk.{run_id}"}
    failed = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failed == set(failing), failed
    for name, check in failing.items():
        failure = cases[name].find("failure")
        assert failure is not None and check in (failure.get("message") or "")
        assert f"{check}: failed" in (failure.text or "")
    for element in (root, suite):
        assert element.get("tests") == str(len(cases))
        assert element.get("failures") == str(len(failed))
        assert element.get("errors") == "0"
    return root


def markdown_rows(path: Path) -> dict[str, list[str]]:
    text = path.read_text()
    assert len(text) <= 65_536
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    rows = {line.split("`")[1]: [c.strip() for c in line.strip("|").split(" | ")] for line in lines}
    assert set(rows) == {f.stem for f in SCENARIOS.glob("*.yaml")}
    return rows


def test_nothing_running_ci_starts_what_it_needs_gates_and_leaves_nothing(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    env = cold_env(tmp_path, mark)
    out = tmp_path / "out"
    with reference_product(tmp_path / "product", DEMO_FAULTS) as (port, db):
        target_file = target(tmp_path, port, db, "http")
        first = ci(env, *ci_args(SCENARIOS, target_file, out, "ci-first"))
        assert first.returncode == 1, first.stderr
        assert "Traceback" not in first.stderr
        assert marked(mark) == []  # nothing of this ci is left running
        assert started_pids(first.stderr) and all(gone(p) for p in started_pids(first.stderr))
        data = json.loads(first.stdout)
        assert data["gate"]["exit_code"] == 1 and data["gate"]["passed"] is False
        assert data["ci"]["own_broker"] is True
        assert {"kafka", "gate", "judge", "verdict", "sink", "judge-standin"} == set(
            data["ci"]["started"]
        )
        check_junit(out / "ci-first.xml", "ci-first", {FAILING: "gate:state"})
        rows = markdown_rows(out / "ci-first.md")
        assert rows[FAILING][1] == "FAIL" and rows[FAILING][5] == "3/5"
        assert "`gate:state` ×2" in rows[FAILING][7]
        assert all(r[1] == "PASS" for name, r in rows.items() if name != FAILING)
        assert all(r[6] == "—" for r in rows.values())  # no baseline
        # every trial pinned to the hash of the file it ran
        versions = data["scenario_versions"]
        for scenario in data["scenarios"]:
            assert scenario["scenario_versions"] == [versions[scenario["scenario_id"]]]

    # The same build made worse: every billable-repair trial loses the billing lines.
    worse = {**DEMO_FAULTS, "debrief-billable-repair": {"lost_field": [1, 2, 3, 4, 5]}}
    with reference_product(tmp_path / "product2", worse) as (port, db):
        target_file = target(tmp_path, port, db, "http")
        second = ci(
            env,
            *ci_args(
                SCENARIOS,
                target_file,
                out,
                "ci-second",
                "--baseline",
                "ci-first",
                "--fail-on-regression",
            ),
        )
    assert second.returncode == 1, second.stderr
    assert marked(mark) == []
    data = json.loads(second.stdout)
    assert data["baseline"]["regressions"] == ["debrief-billable-repair"]
    rows = markdown_rows(out / "ci-second.md")
    assert "**▼ worse" in rows["debrief-billable-repair"][6]
    assert all("▼" not in r[6] for name, r in rows.items() if name != "debrief-billable-repair")
    assert "confidently worse: debrief-billable-repair" in (out / "ci-second.md").read_text()
    check_junit(
        out / "ci-second.xml",
        "ci-second",
        {FAILING: "gate:state", "debrief-billable-repair": "gate:state"},
    )


@contextmanager
def shared_broker_pid() -> Iterator[int | None]:
    """The pid of the shared broker when `make kafka-up` started it here (else None)."""
    pidfile = Path(os.environ.get("PASSK_KAFKA_DIR", ROOT / "var" / "kafka")) / "kafka.pid"
    yield int(pidfile.read_text()) if pidfile.is_file() else None


def test_with_a_broker_up_ci_uses_it_and_what_runs_and_stops_only_its_own(
    settings: Settings, tmp_path: Path
) -> None:
    mark = uuid.uuid4().hex
    env = isolated_env(settings, **{MARK: mark, "PASSK_SESSION_WAIT_S": "15", "COLUMNS": "200"})
    for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(key, None)
    out = tmp_path / "out"
    # A sink of the stack's own, already running: ci must use it and leave it running.
    with (
        shared_broker_pid() as broker_pid,
        running(
            ["worker", "sink"], {k: v for k, v in env.items() if k != MARK}, tmp_path / "sink.log"
        ) as sink,
    ):
        wait_for(lambda: _has_member(settings, "sink"), timeout=120, what="the sink joined")
        with reference_product(tmp_path / "product", DEMO_FAULTS) as (port, db):
            done = ci(env, *ci_args(SCENARIOS, target(tmp_path, port, db, "http"), out, "ci-warm"))
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        data = json.loads(done.stdout)
        assert data["ci"]["own_broker"] is False and data["ci"]["reused"] == ["sink"]
        assert set(data["ci"]["started"]) == {"gate", "judge", "verdict", "judge-standin"}
        assert marked(mark) == []  # what ci started is stopped ...
        assert sink.poll() is None  # ... and the sink it found is not
        if broker_pid is not None:
            assert alive(broker_pid)  # nor the broker (make kafka-up's: not a group leader)
        check_junit(out / "ci-warm.xml", "ci-warm", {FAILING: "gate:state"})
        rows = markdown_rows(out / "ci-warm.md")
        assert rows[FAILING][1] == "FAIL" and rows[FAILING][5] == "3/5"
    from services.kafka.reach import require_broker

    require_broker(5, settings)  # the broker still answers


def _has_member(settings: Settings, processor: str) -> bool:
    from services.cli.status import processor_status

    return all(s.members > 0 for s in processor_status([processor], settings))


def test_an_edited_scenario_is_refused_by_run_and_graded_as_edited_by_ci(
    settings: Settings, tmp_path: Path
) -> None:
    env = isolated_env(settings, COLUMNS="200")
    for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(key, None)
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    original = SCENARIOS / "debrief-quick-question.yaml"
    shutil.copy(original, scenarios / original.name)
    published = subprocess.run(
        [sys.executable, "-m", "services.cli", "scenarios", "publish", str(scenarios)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr
    # The product closes a quick question with product_closed: expecting another exit
    # fails every trial, but only when the edited version is the one graded.
    raw = yaml.safe_load(original.read_text())
    raw["expected_exit"] = "handed_off"
    edited = scenarios / original.name
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    with reference_product(tmp_path / "product", {}) as (port, db):
        target_file = target(tmp_path, port, db, "http")
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli",
                "run",
                "--scenarios",
                str(scenarios),
                "--target",
                str(target_file),
                "--run-id",
                "edited-run",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2, refused.stderr
        assert (
            str(edited) in refused.stderr and "differs from its published version" in refused.stderr
        )
        assert "Traceback" not in refused.stderr
        unpublished = tmp_path / "unpublished"
        unpublished.mkdir()
        shutil.copy(SCENARIOS / "debrief-billable-repair.yaml", unpublished)
        never = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli",
                "run",
                "--scenarios",
                str(unpublished),
                "--target",
                str(target_file),
                "--run-id",
                "never-run",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert never.returncode == 2 and "is not published" in never.stderr, never.stderr
        assert "debrief-billable-repair.yaml" in never.stderr
        done = ci(
            env,
            "--scenarios",
            str(scenarios),
            "--target",
            str(target_file),
            "--run-id",
            "ci-edited",
            "--json",
        )
    assert done.returncode == 1, done.stderr  # graded against the edited expectation
    data = json.loads(done.stdout)
    new_version = data["scenario_versions"]["debrief-quick-question"]
    assert data["ci"]["published"] == {"debrief-quick-question": "updated"}
    store = Store(settings.database_url)
    try:
        trials = store.trials("ci-edited")
    finally:
        store.close()
    assert len(trials) == 3 and {t.scenario_version for t in trials} == {new_version}
    assert all(t.outcome == "failed" for t in trials)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_ci_stops_everything_it_started(tmp_path: Path, sig: int) -> None:
    mark = uuid.uuid4().hex
    env = cold_env(tmp_path, mark)
    # Every trial hangs at its third reply: the signal finds ci mid-conversation.
    hang = {f.stem: {"hang": [1, 2, 3, 4, 5]} for f in SCENARIOS.glob("*.yaml")}
    with reference_product(tmp_path / "product", hang) as (port, db):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "ci",
                "--scenarios",
                str(SCENARIOS),
                "--target",
                str(target(tmp_path, port, db, "http", timeout_s=300)),
                "--run-id",
                "ci-stopped",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            seen: list[str] = []
            assert proc.stderr is not None
            deadline = time.monotonic() + 300
            for line in proc.stderr:  # until its workers run and the scenarios are out
                seen.append(line.rstrip("\n"))
                if line.startswith("ci: published") or time.monotonic() > deadline:
                    break
            assert any(s.startswith("ci: published") for s in seen), "\n".join(seen)
            pids = started_pids("\n".join(seen))
            assert len(pids) == 6  # four workers, the stand-in, the broker's group
            wait_for(lambda: _talking(db), timeout=60, what="conversations under way")
            assert all(not gone(p) for p in pids)
            proc.send_signal(sig)
            try:
                rest = proc.communicate(timeout=180)[1]
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"ci still running 180 s after {signal.Signals(sig).name}:\n"
                    f"{stacks_of(proc.pid)}"
                )
        finally:
            if proc.poll() is None:
                proc.kill()
                for group in started_pids("\n".join(seen)):  # what a hung ci left
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(group, signal.SIGKILL)
    assert proc.returncode == 130, "\n".join(seen) + rest
    assert "Traceback" not in rest
    assert "everything it started is stopped" in rest
    assert all(gone(p) for p in pids)
    assert marked(mark) == []
    assert not any((tmp_path / "tmp").glob("passk-ci-*"))  # its data directory is gone too


def _talking(db: Path) -> Any:
    import sqlite3

    if not db.exists():
        return False
    try:
        return sqlite3.connect(db).execute("SELECT count(*) FROM sessions").fetchone()[0] > 0
    except sqlite3.Error:
        return False
