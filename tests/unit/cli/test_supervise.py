"""The supervisord configuration `make up` writes: on a secured broker each worker's
program carries its own Kafka user, and no other worker's password."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.liveness import SocketPlaceError, socket_in, supervisor_socket
from services.cli.main import app as cli
from services.cli.supervise import supervisord_conf, worker_programs, write_private
from services.contract.exits import ExitCode
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
        others = [
            f"pw-of-{u}"
            for u in ("admin", "passk-cli", *(f"passk-{w}" for w in WORKERS if w != worker))
        ]
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


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of a short path (pytest's own are too deep for a unix socket),
    as the one tempfile hands out, with no XDG_RUNTIME_DIR set."""
    place = Path(tempfile.mkdtemp(prefix="pk", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(place))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield place
    shutil.rmtree(place, ignore_errors=True)


def _deep(tmp_path: Path) -> Path:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "var" / "run"
    deep.mkdir(parents=True)
    return deep


def test_a_run_dir_too_deep_for_a_unix_socket_gets_a_short_one_that_binds(
    tmp_path: Path, short_tmp: Path
) -> None:
    deep = _deep(tmp_path)
    sock = socket_in(deep)
    # in a directory of this user's that no one else may enter, not in the shared /tmp
    assert sock.parent == short_tmp / f"passk-{os.getuid()}"
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert sock != socket_in(tmp_path)
    assert sock == socket_in(deep / ".." / "run")  # one checkout, one socket
    conf = _conf([], deep)
    assert f"file={sock}" in conf and f"serverurl=unix://{sock}" in conf
    # supervisord binds "<file>.<pid>" first: that must fit in a unix socket's path too
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(f"{sock}.4194304")
    os.unlink(f"{sock}.4194304")
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError, match="too long"):
        s.bind(str(deep / "supervisor.sock.4194304"))  # why: the natural path would not


def test_the_login_sessions_runtime_dir_is_used_when_it_is_private(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = short_tmp / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert socket_in(_deep(tmp_path)).parent == runtime


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: p.mkdir(mode=0o777) or p.chmod(0o777), "is open to other users (mode 777)"),
        (lambda p: p.mkdir(mode=0o750), "is open to other users (mode 750)"),
        (lambda p: p.symlink_to(p.parent), "is a symbolic link"),
        (lambda p: p.write_text("x"), "is not a directory"),
    ],
)
def test_a_socket_directory_someone_could_have_made_first_is_refused(
    tmp_path: Path, short_tmp: Path, make: Callable[[Path], object], problem: str
) -> None:
    place = short_tmp / f"passk-{os.getuid()}"
    make(place)
    with pytest.raises(SocketPlaceError, match=re.escape(problem)) as refused:
        socket_in(_deep(tmp_path))
    assert str(place) in str(refused.value) and refused.value.code == ExitCode.USAGE


def test_a_socket_directory_of_another_user_is_refused(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.getuid()
    (short_tmp / f"passk-{real + 1}").mkdir(mode=0o700)  # made by us: not theirs
    monkeypatch.setattr(os, "getuid", lambda: real + 1)
    with pytest.raises(SocketPlaceError, match=f"belongs to uid {real}, not to this user"):
        socket_in(_deep(tmp_path))


def test_an_open_runtime_dir_is_refused_not_used(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = short_tmp / "run-user"
    runtime.mkdir()
    runtime.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    with pytest.raises(
        SocketPlaceError, match=r"XDG_RUNTIME_DIR .* is open to other users"
    ) as refused:
        socket_in(_deep(tmp_path))
    assert "unset it" in str(refused.value) and "remove it" not in str(refused.value)


def test_a_relative_runtime_dir_is_ignored(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run-user")  # the XDG specification: invalid
    assert socket_in(_deep(tmp_path)).parent == short_tmp / f"passk-{os.getuid()}"


def test_a_temporary_directory_that_cannot_hold_one_is_a_clear_error(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = short_tmp / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))
    with pytest.raises(SocketPlaceError, match="No such file or directory") as refused:
        socket_in(_deep(tmp_path))
    assert str(gone / f"passk-{os.getuid()}") in str(refused.value)


def test_a_fallback_still_too_long_is_refused_with_what_to_do(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # pytest's: deep
    with pytest.raises(SocketPlaceError, match="at most 96 bytes.*set TMPDIR"):
        socket_in(_deep(tmp_path))
    assert not (tmp_path / f"passk-{os.getuid()}").exists()  # refused before it is made
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    with pytest.raises(SocketPlaceError, match="at most 96 bytes.*set XDG_RUNTIME_DIR"):
        socket_in(_deep(tmp_path / "x"))


def test_status_asks_where_the_written_configuration_says_whatever_its_tmpdir(
    tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / ("d" * 60) / ("e" * 60) / "var"
    run = data / "run"
    run.mkdir(parents=True)
    (run / "supervisord.conf").write_text(_conf([], run))
    sock = socket_in(run)
    # `passk status` run later with another temporary directory
    other = Path(tempfile.mkdtemp(prefix="pk", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(other))
    try:
        assert socket_in(run) != sock
        assert supervisor_socket(data) == sock
        # a configuration naming a socket in a directory open to others is not followed
        sock.parent.chmod(0o777)
        assert supervisor_socket(data) == run.resolve() / "supervisor.sock"
    finally:
        sock.parent.chmod(0o700)
        shutil.rmtree(other, ignore_errors=True)


def test_status_reads_past_a_configuration_that_is_not_text(
    tmp_path: Path, short_tmp: Path
) -> None:
    data = tmp_path / ("d" * 60) / ("e" * 60) / "var"
    run = data / "run"
    run.mkdir(parents=True)
    (run / "supervisord.conf").write_bytes(b"[supervisorctl]\nserverurl=unix:///x\xff\n")
    assert supervisor_socket(data) == socket_in(run)


def test_supervise_config_with_no_private_place_is_a_usage_error(
    tmp_path: Path, short_tmp: Path
) -> None:
    (short_tmp / f"passk-{os.getuid()}").symlink_to(short_tmp)
    out = tmp_path / ("d" * 60) / ("e" * 60) / "var" / "run" / "supervisord.conf"
    result = CliRunner().invoke(
        cli, ["supervise", "config", "--out", str(out), "--log-dir", str(tmp_path / "log")]
    )
    assert result.exit_code == 2, result.output
    assert "is a symbolic link" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_supervise_socket_answers_only_while_the_socket_is_ours(
    tmp_path: Path, short_tmp: Path
) -> None:
    """What `make up` and `make down` ask before they talk to the supervisord a written
    configuration names."""
    run = tmp_path / ("d" * 60) / ("e" * 60) / "var" / "run"
    run.mkdir(parents=True)
    conf = run / "supervisord.conf"
    conf.write_text(_conf([], run))
    sock = socket_in(run)
    asked = CliRunner().invoke(cli, ["supervise", "socket", "--conf", str(conf)])
    assert asked.exit_code == 0 and asked.output.strip() == str(sock), asked.output
    # a tmp cleaner removed ours and another user's directory, open to all, stands there
    sock.parent.chmod(0o777)
    try:
        refused = CliRunner().invoke(cli, ["supervise", "socket", "--conf", str(conf)])
    finally:
        sock.parent.chmod(0o700)
    assert refused.exit_code == 2, refused.output
    assert "is open to other users" in refused.output and "refusing" in refused.output
    assert "Traceback" not in refused.output
    # in the configuration's own directory: always ours
    near = tmp_path / "var" / "run"
    near.mkdir(parents=True)
    (near / "supervisord.conf").write_text(_conf([], near))
    asked = CliRunner().invoke(
        cli, ["supervise", "socket", "--conf", str(near / "supervisord.conf")]
    )
    assert asked.output.strip() == str(near.resolve() / "supervisor.sock")
