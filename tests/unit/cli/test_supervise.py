"""The supervisord configuration `make up` writes: on a secured broker each worker's
program carries its own Kafka user, and no other worker's password."""

from __future__ import annotations

import configparser
import json
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from services.cli.liveness import socket_in, supervisor_socket
from services.cli.supervise import supervisord_conf, worker_programs, write_private
from services.contract.processors import WORKERS
from services.kafka.kafka_users import UnknownKafkaUser, processor_user


def _secrets(tmp_path: Path, users: list[str]) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "users.json").write_text(json.dumps({u: f"pw-of-{u}" for u in users}))
    (secrets / "ca.pem").write_text("not a real certificate")
    return secrets


def _environments(conf: str) -> dict[str, dict[str, str]]:
    parser = configparser.RawConfigParser()
    parser.read_string(conf)
    out = {}
    for section in parser.sections():
        if not section.startswith("program:"):
            continue
        pairs = parser.get(section, "environment", fallback="")
        env = {}
        for pair in filter(None, pairs.split(",")):  # the test's values hold no comma
            key, _, value = pair.partition("=")
            env[key] = value.strip('"')
        out[section.removeprefix("program:")] = env
    return out


def _conf(programs: list, tmp_path: Path) -> str:  # type: ignore[type-arg]
    return supervisord_conf(programs, run_dir=tmp_path, log_dir=tmp_path, cwd=tmp_path)


def test_each_worker_runs_as_its_own_kafka_user(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path, ["admin", "passk-cli", *(processor_user(w) for w in WORKERS)])
    envs = _environments(_conf(worker_programs(WORKERS, "passk", 9464, secrets), tmp_path))
    assert set(envs) == set(WORKERS)
    for worker, env in envs.items():
        user = f"passk-{worker}"
        assert env["KAFKA_SASL_USERNAME"] == user
        assert env["KAFKA_SASL_PASSWORD"] == f"pw-of-{user}"
        assert env["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert env["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert env["KAFKA_SSL_CAFILE"] == str(secrets / "ca.pem")
        others = [f"pw-of-{u}" for u in ("admin", "passk-cli",
                                          *(f"passk-{w}" for w in WORKERS if w != worker))]
        assert not any(pw in env.values() for pw in others)


def test_a_plaintext_broker_gives_workers_no_kafka_user(tmp_path: Path) -> None:
    envs = _environments(_conf(worker_programs(WORKERS, "passk", 9464), tmp_path))
    assert all(not any(k.startswith("KAFKA_") for k in env) for env in envs.values())
    assert envs["gate"]["PASSK_METRICS_PORT"] == "9464"


def test_a_worker_without_a_user_is_refused_by_name(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path, ["passk-gate"])
    with pytest.raises(UnknownKafkaUser, match="passk-verdict"):
        worker_programs(["gate", "verdict"], "passk", 9464, secrets)


def test_the_configuration_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    conf = tmp_path / "run" / "supervisord.conf"
    conf.parent.mkdir()
    conf.write_text("an older, world-readable file")
    conf.chmod(0o644)
    write_private(conf, "KAFKA_SASL_PASSWORD=x")
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert conf.read_text() == "KAFKA_SASL_PASSWORD=x"


def test_a_short_run_dir_keeps_its_socket(tmp_path: Path) -> None:
    conf = _conf([], tmp_path)
    assert f"file={tmp_path.resolve() / 'supervisor.sock'}" in conf
    assert f"serverurl=unix://{tmp_path.resolve() / 'supervisor.sock'}" in conf


def test_a_run_dir_too_deep_for_a_unix_socket_gets_a_short_one_that_binds(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "var" / "run"
    deep.mkdir(parents=True)
    sock = socket_in(deep)
    assert sock.parent == Path(tempfile.gettempdir()) and sock != socket_in(tmp_path)
    assert sock == socket_in(deep / ".." / "run")  # one checkout, one socket
    conf = _conf([], deep)
    assert f"file={sock}" in conf and f"serverurl=unix://{sock}" in conf
    # what `passk status` asks is where supervisord listens
    assert supervisor_socket(deep.parent) == sock
    # supervisord binds "<file>.<pid>" first: that must fit in a unix socket's path too
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(f"{sock}.4194304")
    os.unlink(f"{sock}.4194304")
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError, match="too long"):
        s.bind(str(deep / "supervisor.sock.4194304"))  # why: the natural path would not
