"""One configuration for the CLI and the workers (issue 21, item 7), as the red team found
it: after `make up` ("no model configured; judges use the offline stand-in"), `passk
calibrate examples/calibration` run in another shell exited 2 with "no judge model
configured", although the README says it uses the stand-in and the judge worker grades
with it. Now `make up` records the endpoint it gave the workers (var/run/judge.json) and
the CLI uses it, saying so. Also checks what `make up` writes down (issue 21, item 5):
var/run/env is 0600 and holds no password of a database URL."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from services.contract.ports import ports
from services.contract.processors import WORKERS, metrics_ports
from tests.support import ROOT, new_prefix, wait_for


def broker_answers(env: dict[str, str]) -> bool:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from kafka import KafkaAdminClient as A; A(bootstrap_"
            "servers=os.environ.get('KAFKA_BOOTSTRAP_SERVERS', '127.0.0.1:9092')).list_topics()",
        ],
        env=env,
        capture_output=True,
        timeout=60,
    )
    return probe.returncode == 0


# alone: it runs `make up` in this checkout, which wants the machine's ports and the
# checkout's var/ to itself (it passed alone, and failed once beside three other workers)
pytestmark = [pytest.mark.e2e, pytest.mark.alone, pytest.mark.timeout(1200)]
RUN = ROOT / "var" / "run"


def free_offset() -> int:
    """A PASSK_PORT_OFFSET that puts every port of the stack on a free port of the test
    range (services/contract/ports.py; each worker's /metrics above the base)."""
    import random

    from services.contract.ports import DEFAULT_PORTS
    from services.contract.processors import PROCESSORS
    from tests.support import port_is_free, test_port_range

    low, high = test_port_range()
    top = max(DEFAULT_PORTS.values()) + len(PROCESSORS) + 2
    if high - low < top - min(DEFAULT_PORTS.values()):
        # one offset moves ports spread over ~5,200 numbers: more than an xdist worker's
        # slice of the test range; the test runs alone (its marker), so the whole range
        low, high = 20_000, 32_000
    for _ in range(200):
        offset = random.randint(low - min(DEFAULT_PORTS.values()), high - top)
        wanted = [p + offset for p in DEFAULT_PORTS.values()] + [
            DEFAULT_PORTS["PASSK_METRICS_PORT_BASE"] + offset + i
            for i in range(len(PROCESSORS) + 2)
        ]
        if all(port_is_free(p) for p in wanted):
            return offset
    raise RuntimeError("no free port offset in the test range")


def fresh_shell() -> dict[str, str]:
    """A shell that has exported nothing of passk's: what `make up` wrote down is all it
    knows of the stack."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PASSK_", "OPENAI_", "KAFKA_", "VIRTUAL_ENV"))
    }


def test_calibrate_after_make_up_uses_the_stand_in_the_workers_use(tmp_path: Path) -> None:
    pid = RUN / "supervisord.pid"
    if pid.exists() and Path(f"/proc/{pid.read_text().strip()}").exists():
        pytest.fail(f"a `make up` already runs in {ROOT}; `make down` first")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PASSK_", "OPENAI_", "VIRTUAL_ENV"))
    }
    prefix = new_prefix()
    env.update(
        PASSK_TOPIC_PREFIX=prefix,  # the shared broker is reused; our topics are ours
        # every port of the stack moved by one setting (README: a second stack)
        PASSK_PORT_OFFSET=str(free_offset()),
        # a port of its own wins over the offset: the shared broker, not one of make up's
        KAFKA_BOOTSTRAP_SERVERS=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
        PASSK_CACHE_DIR=os.environ.get("PASSK_CACHE_DIR", str(Path.home() / ".cache/passk")),
        # a query-string password, which the old sed mask wrote out whole
        PASSK_WITNESS_URL="postgresql://db/passk?user=u&password=hunter2",
    )
    try:
        up = subprocess.run(
            ["bash", "infra/stack/up.sh"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        assert "judges use the offline stand-in" in up.stdout

        written = RUN / "env"
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        body = written.read_text()
        assert "PASSK_WITNESS_URL=postgresql://db/passk?user=u&password=***" in body, body
        assert "hunter2" not in body and "OPENAI_API_KEY" not in body

        # The continuous auditor runs under supervisord with the workers, on its /metrics
        # port, and its audits of the (empty) log end clean.
        audit_port = metrics_ports(["audit"], ports(env)["PASSK_METRICS_PORT_BASE"])["audit"]

        def audited() -> bool:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{audit_port}/metrics", timeout=5
                ) as answer:
                    text = answer.read().decode()
            except OSError:
                return False
            return (
                'passk_audit_runs_total{result="clean"} 0.0' not in text
                and 'passk_audit_runs_total{result="clean"}' in text
            )

        wait_for(
            audited,
            timeout=180,
            interval=1.0,
            what=f"the supervised auditor ending a clean audit (:{audit_port}/metrics)",
        )

        # Another shell: none of `make up`'s exports, not even the offset or the prefix.
        status = subprocess.run(
            [sys.executable, "-m", "services.cli", "status", "--json"],
            cwd=ROOT,
            env=fresh_shell(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        groups = {p["group"] for p in json.loads(status.stdout)["processors"]}
        assert groups == {f"{prefix}{w}" for w in WORKERS}, groups
        report = subprocess.run(
            [sys.executable, "-m", "services.cli", "report", "--run-id", "nothing-yet"],
            cwd=ROOT,
            env=fresh_shell(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert report.returncode == 3, report.stdout + report.stderr  # its store: no trials
        assert str(tmp_path / "passk.db") in report.stderr, report.stderr  # the stack's store
        calibrate = subprocess.run(
            [sys.executable, "-m", "services.cli", "calibrate", "examples/calibration", "--json"],
            cwd=ROOT,
            env=fresh_shell(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert calibrate.returncode == 0, calibrate.stdout + calibrate.stderr
        assert "the offline stand-in `make up` started" in calibrate.stderr, calibrate.stderr
        judges = {j["judge_id"]: j for j in json.loads(calibrate.stdout)["judges"]}
        # examples/calibration/README.md's matrices, which the stand-in is built to give
        assert [judges["covered_expected_topics"][k] for k in ("tp", "fp", "fn", "tn")] == [
            5,
            0,
            1,
            6,
        ]
        assert [judges["no_customer_charge_stated"][k] for k in ("tp", "fp", "fn", "tn")] == [
            3,
            3,
            1,
            5,
        ]
    finally:
        down = subprocess.run(
            ["bash", "infra/stack/down.sh"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert not (RUN / "judge.json").exists()  # the stand-in it named is stopped
    assert not (RUN / "passk.env").exists()  # a fresh shell takes the defaults again
    # `make up` reused the broker that already ran (CI's `make kafka-up`), so `make down`
    # leaves it running: it once stopped it, and every later test lost its broker.
    assert "the broker was not started by make up; left running" in down.stdout, down.stdout
    assert broker_answers(env), "make down stopped a broker that make up did not start"

    # After `make down`: the CLI says exactly what to export, not "use the stand-in".
    after = subprocess.run(
        [sys.executable, "-m", "services.cli", "calibrate", "examples/calibration", "--no-publish"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert after.returncode == 2, after.stdout + after.stderr
    assert "export OPENAI_API_KEY" in after.stderr and "Traceback" not in after.stderr
