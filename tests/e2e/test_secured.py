"""The pipeline through a real SASL_SSL broker with per-principal ACLs, started by
`PASSK_KAFKA_SECURITY=sasl_ssl` kafka-up in this test's own directory: grading works
end to end, a wrong password is a clear refusal (exit 5), a principal writing outside
its ACLs is refused and logged by the broker's authorizer, and no secret or transcript
text shows up in any log or /metrics page of the run."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from services.contract.processors import WORKERS
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import EXIT_KAFKA_REFUSED, kafka_client_kwargs
from tests.e2e.conftest import (
    Pipeline,
    free_port,
    free_port_block,
    supervise_config,
    supervisord,
)
from tests.own_kafka import OwnKafka, own_kafka
from tests.support import ROOT, isolated_env, new_prefix, settled, wait_for

# xdist_group: the module's secured broker is started once, on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800), pytest.mark.xdist_group(__name__)]
SCENARIOS = ROOT / "examples" / "scenarios"
PROCESSORS = list(WORKERS)
API_KEY = f"sk-secret-{uuid.uuid4().hex}"
# Well under kafka-python's 30 s bootstrap timeout, generous for a loaded 2-core start-up.
BOUND_S = 25.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OwnKafka, str]]:
    prefix = new_prefix()
    # The authorizer logs allowed operations too (DEBUG): which principal each
    # supervised worker joined its group as, seen by the broker.
    with own_kafka(
        tmp_path_factory.mktemp("kafka-secured"),
        security="sasl_ssl",
        topic_prefix=prefix,
        authorizer_log="DEBUG",
    ) as kafka:
        yield kafka, prefix


def _settings(kafka: OwnKafka, prefix: str, user: str, tmp_path: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap,
        PASSK_TOPIC_PREFIX=prefix,
        PASSK_DATABASE_URL=f"sqlite:///{tmp_path / 'passk.db'}",
        PASSK_DATA_DIR=str(tmp_path / "data"),
        PASSK_SESSION_WAIT_S=5,
        PASSK_JUDGE_WAIT_S=60,
        # About security, not calibration: uncalibrated judges fail trials, as in conftest.
        PASSK_UNCALIBRATED_JUDGES="gating",
        **kafka.client_env(user),
    )


def test_pipeline_grades_a_replay_through_sasl_ssl_and_leaks_nothing(
    secured: tuple[OwnKafka, str], tmp_path: Path
) -> None:
    kafka, prefix = secured
    settings = _settings(kafka, prefix, "passk-cli", tmp_path)
    standin = free_port()
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"http://127.0.0.1:{standin}/v1",
        OPENAI_API_KEY=API_KEY,
        PASSK_JUDGE_MODEL="passk-standin",
        PASSK_LOG_LEVEL="info",
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    pipeline = Pipeline(settings, env, logs)
    metrics_ports = {p: free_port() for p in PROCESSORS}
    for p in PROCESSORS:
        pipeline.worker_env[p] = {
            **kafka.client_env(f"passk-{p}"),
            "PASSK_METRICS_PORT": str(metrics_ports[p]),
        }
    run_id = "secured-run"
    traffic, expected_file = tmp_path / "traffic.jsonl", tmp_path / "expected.json"
    try:
        pipeline.start(
            "judge-standin", "judge-standin", "--host", "127.0.0.1", "--port", str(standin)
        )
        for p in PROCESSORS:
            pipeline.start_worker(p)
        wait_for(
            lambda: (
                all(proc.poll() is None for proc in pipeline.procs.values())
                and settled(settings, PROCESSORS)
            ),
            timeout=300,
            interval=2.0,
            what="every worker up on the secured broker",
        )
        out = pipeline.passk("scenarios", "publish", str(SCENARIOS))
        assert out.returncode == 0, out.stderr
        gen = pipeline.passk(
            "generate",
            "--scenarios",
            str(SCENARIOS),
            "--run-id",
            run_id,
            "--out",
            str(traffic),
            "--expected",
            str(expected_file),
            "--trials",
            "4",
            "--seed",
            "3",
            "--default-pass-prob",
            "0.8",
        )
        assert gen.returncode == 0, gen.stderr
        replay = pipeline.passk("replay", str(traffic), env=kafka.client_env("passk-replay"))
        assert replay.returncode == 0, replay.stdout + replay.stderr
        waited = pipeline.passk(
            "wait", "--run-id", run_id, "--expected", str(expected_file), "--timeout", "300"
        )
        assert waited.returncode == 0, waited.stdout + waited.stderr
        report = json.loads(pipeline.passk("report", "--run-id", run_id, "--json").stdout)
        expected = json.loads(expected_file.read_text())
        got = {t["trial_id"]: t["outcome"] for t in report["trials"]}
        assert got == {t["trial_id"]: t["expected_outcome"] for t in expected["trials"]}
        pages = {
            p: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
            .read()
            .decode()
            for p, port in metrics_ports.items()
        }
        assert all("passk_" in page for page in pages.values())
    finally:
        pipeline.stop_all()

    secrets = [*kafka.passwords().values(), API_KEY]
    transcripts = _transcript_texts(traffic)
    assert len(transcripts) >= 10
    outputs = {f"/metrics of {p}": page for p, page in pages.items()}
    for log in [*logs.iterdir(), *kafka.data_dir.glob("logs/*")]:
        outputs[str(log)] = log.read_text(errors="replace")
    assert sum(len(text) for text in outputs.values()) > 10_000  # there is something to read
    for where, text in outputs.items():
        for secret in secrets:
            assert secret not in text, f"a password or API key appears in {where}"
        for line in transcripts:
            assert line not in text, f"transcript text {line[:40]!r} appears in {where}"


def _transcript_texts(traffic: Path) -> set[str]:
    """Message contents long enough to be recognisable if a log ever printed one."""
    texts: set[str] = set()
    for line in traffic.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        for message in (event.get("transcript") or []) if isinstance(event, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str) and len(content) >= 24:
                texts.add(content)
    return texts


def test_a_wrong_password_is_refused_with_a_clear_error(
    secured: tuple[OwnKafka, str], tmp_path: Path
) -> None:
    kafka, prefix = secured
    settings = _settings(kafka, prefix, "passk-cli", tmp_path)
    wrong = f"wrong-{uuid.uuid4().hex}"
    env = isolated_env(settings, KAFKA_SASL_PASSWORD=wrong, PASSK_BROKER_WAIT_S="3")
    pipeline = Pipeline(settings, env, tmp_path)

    def timed(args: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        return pipeline.passk(*args, timeout=300), time.monotonic() - started

    # All at once, as a supervisor starts workers beside an operator's commands. A worker
    # keeps kafka-python's own 30 s wait (a supervised one is then restarted, never left
    # FATAL by fast failed starts); a command is told within its wait by its credentials
    # check (BOUND_S: a loaded machine's start).
    commands = (["status"], ["topics", "create"], ["worker", "gate"])
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(timed, commands))
    for args, (result, took) in zip(commands, results, strict=True):
        assert result.returncode == EXIT_KAFKA_REFUSED, (args, result.stdout, result.stderr)
        assert "authentication failed for user 'passk-cli'" in result.stderr
        assert "Traceback" not in result.stderr
        assert wrong not in result.stdout + result.stderr
        if args[0] != "worker":
            assert took < BOUND_S, (args, took)
    # the right password passes the same door
    ok = pipeline.passk("status", "--processors", "gate", env=kafka.client_env("passk-cli"))
    assert ok.returncode in (0, 1), ok.stderr  # 1: no gate worker runs; not a refusal
    assert "authentication failed" not in ok.stderr


def test_a_principal_writing_outside_its_acls_is_refused_and_logged(
    secured: tuple[OwnKafka, str], tmp_path: Path
) -> None:
    kafka, prefix = secured

    def producer(user: str) -> KafkaProducer:
        settings = _settings(kafka, prefix, user, tmp_path)
        return KafkaProducer(**kafka_client_kwargs(settings), acks="all", max_block_ms=30_000)

    denied = [
        ("passk-judge", Topic.TRIAL_VERDICTS),
        ("passk-replay", Topic.GATE_RESULTS),
        ("passk-replay", Topic.SCENARIOS),
        ("passk-sink", Topic.TRIAL_VERDICTS),
    ]
    for user, topic in denied:
        p = producer(user)
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                p.send(
                    topic_name(topic, _settings(kafka, prefix, user, tmp_path)), b'{"forged": true}'
                ).get(timeout=60)
        finally:
            p.close()
    log = kafka.data_dir / "logs" / "kafka-authorizer.log"
    for user, topic in denied:
        line = (
            f"Principal = User:{user} is Denied operation = WRITE from host = 127.0.0.1 "
            f"on resource = Topic:LITERAL:{prefix}{topic.value}"
        )
        wait_for(
            lambda line=line: line in log.read_text(),
            timeout=30,
            what=f"the authorizer's log of {line}",
        )
    # and what a principal is allowed, it may do: the replay user writes an input topic
    p = producer("passk-replay")
    try:
        meta = p.send(f"{prefix}{Topic.SESSION_PERSISTED.value}", b"not json").get(timeout=60)
        assert meta.offset >= 0
    finally:
        p.close()


def test_supervised_workers_connect_each_as_its_own_user(
    secured: tuple[OwnKafka, str], tmp_path: Path
) -> None:
    """What `make up` does on a secured broker: `passk supervise config --kafka-secrets`
    gives each program its own user, and supervisord holds no user of its own."""
    kafka, prefix = secured
    settings = _settings(kafka, prefix, "passk-cli", tmp_path)
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
        OPENAI_API_KEY=API_KEY,
        PASSK_JUDGE_MODEL="passk-standin",
    )
    # as infra/stack/up.sh starts supervisord: without the CLI user's name and password
    del env["KAFKA_SASL_USERNAME"], env["KAFKA_SASL_PASSWORD"]
    conf, logs = tmp_path / "run" / "supervisord.conf", tmp_path / "log"
    supervise_config(
        conf,
        logs,
        env,
        "--metrics-base",
        str(free_port_block(len(PROCESSORS))),
        "--kafka-secrets",
        str(kafka.secrets),
    )
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600  # it holds the workers' passwords
    authorizer = kafka.data_dir / "logs" / "kafka-authorizer.log"
    since = authorizer.stat().st_size  # earlier tests' workers joined the same groups
    join = re.compile(
        r"Principal = User:(\S+) is Allowed operation = READ from host = \S+ "
        rf"on resource = Group:LITERAL:{re.escape(prefix)}(\S+) "
        r"for request = JoinGroup"
    )

    def joined() -> set[tuple[str, str]]:
        return set(join.findall(_appended(authorizer, since)))

    with supervisord(conf, env):
        wait_for(
            lambda: settled(settings, PROCESSORS),
            timeout=600,
            interval=2.0,
            what="every supervised worker in its group on the secured broker",
        )
        wait_for(
            lambda: {g for _, g in joined()} >= set(PROCESSORS),
            timeout=60,
            what="the broker's record of each worker joining its group",
        )
    # each group was joined by its own processor's user, and by no other principal
    assert joined() == {(f"passk-{p}", p) for p in PROCESSORS}
    for log in logs.iterdir():
        text = log.read_text(errors="replace")
        for secret in kafka.passwords().values():
            assert secret not in text, f"a password appears in {log}"


def _appended(log: Path, since: int) -> str:
    """What the broker wrote to `log` after it was `since` bytes long (its rolled-over
    predecessor included, if it rolled meanwhile)."""
    rolled = log.with_name(log.name + ".1")
    data = log.read_bytes()
    if len(data) < since and rolled.exists():
        data = rolled.read_bytes()[since:] + data
    else:
        data = data[since:]
    return data.decode(errors="replace")
