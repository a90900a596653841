"""The broker dies (SIGKILL) in the middle of a replay and comes back on the same data
directory. Nobody touches the workers: each must live through the outage, say it was
degraded, resume by itself, and every trial must end exactly as it should.

This test starts its OWN broker on free ports (never the shared one other tests use)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from services.contract.settings import Settings
from services.runtime.outage import health_path, read_health
from services.storage.store import Store
from tests.conftest import make_settings
from tests.e2e.conftest import PROCESSORS, Pipeline, free_port, trials_in
from tests.support import ROOT, isolated_env, settled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.alone]
SCENARIOS = ROOT / "examples" / "scenarios"
OUTAGE_S = 20.0
REPLAY_GRACE_S = 45.0  # after the broker is back, for the paced replay to finish
STOP_S = 20.0  # SIGTERM to exit, broker gone: far below mode's 60 s shutdown timeout


class OwnBroker:
    def __init__(self, data: Path) -> None:
        self.port, self.cport = free_port(), free_port()
        self.env = dict(
            os.environ,
            PASSK_KAFKA_PORT=str(self.port),
            PASSK_KAFKA_CONTROLLER_PORT=str(self.cport),
            PASSK_KAFKA_DIR=str(data),
            PYTHON=sys.executable,
            PASSK_KAFKA_READY_S="400",
        )
        self.pidfile = data / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def up(self) -> None:
        out = subprocess.run(
            ["bash", "infra/kafka/kafka-up.sh"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout + out.stderr

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, as a crash or an OOM kill would do it."""
        pid = int(self.pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), timeout=30, what="the broker gone")
        self.pidfile.unlink()

    def down(self) -> None:
        subprocess.run(
            ["bash", "infra/kafka/kafka-down.sh"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=120,
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent) is gone for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def degraded(settings: Settings, name: str) -> bool:
    data = read_health(health_path(settings.data_dir, name)) or {}
    return "broker" in (data.get("degraded") or {})


def test_a_broker_killed_mid_replay_loses_no_trial_and_no_worker(tmp_path: Path) -> None:
    broker = OwnBroker(tmp_path / "kafka")
    broker.up()
    pipeline: Pipeline | None = None
    try:
        settings = make_settings(
            broker.bootstrap,
            tmp_path,
            # longer than the outage (a SIGKILLed broker can take minutes to recover its
            # logs on a busy machine) and a re-sent replay: a session they delay is still
            # in time. Deadlines run on broker time, which an outage does not stop; no
            # trial waits for them here (no session is missing from this traffic).
            # Uncalibrated judges fail trials, as make_settings has it: about outages.
            PASSK_SESSION_WAIT_S=900,
            PASSK_JUDGE_WAIT_S=900,
        )
        standin = free_port()
        env = isolated_env(
            settings,
            OPENAI_BASE_URL=f"http://127.0.0.1:{standin}/v1",
            OPENAI_API_KEY="stand-in",
            PASSK_JUDGE_MODEL="passk-standin",
        )
        logs = tmp_path / "logs"
        logs.mkdir()
        pipeline = Pipeline(settings, env, logs)
        pipeline.start(
            "judge-standin", "judge-standin", "--host", "127.0.0.1", "--port", str(standin)
        )
        for name in PROCESSORS:
            pipeline.start_worker(name)
        wait_for(
            lambda: settled(settings, PROCESSORS), timeout=180, interval=1.0, what="every worker up"
        )

        run_id = "outage-run"
        traffic, expected = pipeline.publish_and_generate(
            SCENARIOS,
            tmp_path,
            run_id,
            "--quirk-rate",
            "session_missing=0",
            trials=20,
            seed=7,
            pass_prob=0.8,
        )
        expected_file = tmp_path / "expected.json"
        total = len(expected["trials"])
        store = Store(settings.database_url)

        with pipeline.replaying(traffic, rate=8) as replay:
            wait_for(
                lambda: trials_in(store, run_id) >= 5,
                timeout=300,
                interval=0.5,
                what="the first verdicts",
            )
            broker.kill()
            killed_at = time.monotonic()
            # the gate and verdict notice at their next offset probe (every 5 s)
            wait_for(
                lambda: degraded(settings, "gate") and degraded(settings, "verdict"),
                timeout=60,
                interval=0.5,
                what="gate and verdict report the broker down",
            )
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - killed_at)))  # the outage
            dead = {n: p.returncode for n, p in pipeline.procs.items() if p.poll() is not None}
            assert not dead, f"workers died during the outage: {dead}"
            broker.up()  # the same data directory; no worker is touched
            try:
                replay.communicate(timeout=REPLAY_GRACE_S)
            except subprocess.TimeoutExpired:
                replay.kill()
                replay.wait(30)
            if replay.returncode != 0:
                # The harness, not a worker: `passk replay` gives up what the broker has
                # not acknowledged within PASSK_PRODUCER_DELIVERY_TIMEOUT_S (exit 4, the
                # first line named; tests/e2e/test_producer_outage.py). Send the file
                # again, as an operator would: events have fixed ids and the pipeline
                # drops repeats.
                print(f"replay exited {replay.returncode} across the outage; sending again")
                again = pipeline.passk("replay", str(traffic))
                assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]

        waited = pipeline.passk(
            "wait", "--run-id", run_id, "--expected", str(expected_file), "--timeout", "600"
        )
        assert waited.returncode == 0, waited.stdout[-4000:] + waited.stderr[-2000:]
        pipeline.wait_settled(timeout=300)
        assert trials_in(store, run_id) == total
        dead = {n: p.returncode for n, p in pipeline.procs.items() if p.poll() is not None}
        assert not dead, f"workers died: {dead}"
        wait_for(
            lambda: not any(degraded(settings, n) for n in PROCESSORS),
            timeout=60,
            what="no worker degraded any more",
        )
        # one warning per caller when the outage began (and one when it ended), not one
        # per failed attempt, although each caller retried many times
        for name in PROCESSORS:
            log = (logs / f"{name}.log").read_text(errors="replace")
            callers = Counter(
                line.split("broker unreachable (")[1].split(":")[1]
                for line in log.splitlines()
                if "broker unreachable (" in line
            )
            assert callers and all(n == 1 for n in callers.values()), (name, callers)

        # The broker gone for good: SIGTERM still stops every worker within seconds (the
        # consumer's close used to wait out a 60 s timeout then: docs/faust.md, patch 8).
        broker.kill()
        wait_for(
            lambda: degraded(settings, "gate") and degraded(settings, "verdict"),
            timeout=60,
            interval=0.5,
            what="gate and verdict report the broker gone",
        )
        asked = time.monotonic()
        for proc in pipeline.procs.values():
            proc.terminate()
        for proc in pipeline.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(STOP_S - (time.monotonic() - asked), 0.1))
        running = [n for n, p in pipeline.procs.items() if p.poll() is None]
        assert not running, f"still running {STOP_S:.0f} s after SIGTERM: {running}"
    finally:
        if pipeline is not None:
            pipeline.stop_all()
        broker.down()
