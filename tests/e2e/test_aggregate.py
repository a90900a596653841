"""The aggregate worker as an operator runs it, on the real broker: trial verdicts over
several hours of event time (some delivered twice, some re-graded), the worker SIGKILLed
in the middle of its backlog and restarted. Every figure it publishes last, and every
gauge on its /metrics after the restart, equals the undisturbed count computed here from
the verdicts themselves."""

from __future__ import annotations

import random
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from datetime import UTC, datetime
from math import comb
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scipy.stats import beta

from schemas.events import Outcome, TrialVerdict
from services.cli.status import processor_status
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.conftest import make_settings
from tests.e2e.conftest import free_port
from tests.own_kafka import own_kafka
from tests.support import (
    ROOT,
    isolated_env,
    produce,
    publish_scenarios,
    read_topic,
    stacks_of,
    stop,
    tasks_of,
    wait_for,
)
from tests.unit.factories import scenario

pytestmark = [pytest.mark.e2e, pytest.mark.alone]
SCENARIOS = {"steady": (3, 0.95), "flaky": (5, 0.6)}  # id: (k, pass probability)
TRIALS = 3000
HOURS = 6


def changelog_state(settings: Settings) -> dict[str, Any]:
    """The aggregate's table as its changelog holds it: the last value of each key."""
    (changelog,) = PROCESSORS["aggregate"].changelogs
    state: dict[str, Any] = {}
    for key, value, _ in read_topic(settings, changelog):  # type: ignore[arg-type]
        state[(key or b"").decode().strip('"')] = value
    return state


def table_account(
    state: dict[str, Any], verdicts: list[TrialVerdict], scenario_ids: set[str]
) -> list[str]:
    """What the aggregate's table says of each scenario's count, as findings (none when it
    holds every trial's change): a trial never remembered (its verdict committed past
    unread), or remembered with a change its bucket does not hold (a write lost after the
    memory's). For a lost count, this says which trials and which of the two it was."""
    findings = []
    for scenario_id in sorted(scenario_ids):
        sent = {v.trial_id for v in verdicts if v.scenario_id == scenario_id}
        memories = {
            k.split("|", 2)[2]: m
            for k, m in state.items()
            if k.startswith(f"t|{scenario_id}|") and isinstance(m, dict)
        }
        if missing := sorted(sent - set(memories)):
            findings.append(
                f"{scenario_id}: {len(sent)} trials sent, {len(memories)} "
                f"remembered; never remembered: {missing[:20]}"
            )
        for bucket_key, bucket in state.items():
            if not bucket_key.startswith(f"b|{scenario_id}|") or not isinstance(bucket, dict):
                continue
            ahead = sorted(
                t
                for t, m in memories.items()
                if (m.get("seqs") or {}).get(bucket_key, -1) > bucket.get("seq", 0)
            )
            if ahead:
                findings.append(
                    f"{bucket_key} at seq {bucket.get('seq')}: changes of "
                    f"{ahead[:20]} remembered but not in it"
                )
        # A change lost and never finished, its number then taken by a later trial: two
        # memories name the same change of a bucket (each change has its own number).
        claims: dict[tuple[str, int], list[str]] = defaultdict(list)
        for trial, m in memories.items():
            for bucket_key, seq in (m.get("seqs") or {}).items():
                claims[(bucket_key, seq)].append(trial)
        findings.extend(
            f"{bucket_key}: change {seq} numbered by {sorted(trials)}, so one of them was lost"
            for (bucket_key, seq), trials in sorted(claims.items())
            if len(trials) > 1
        )
    return findings


def traffic(now: float) -> list[TrialVerdict]:
    rng = random.Random(11)
    out: list[TrialVerdict] = []
    for i in range(TRIALS):
        scenario_id = rng.choice(sorted(SCENARIOS))
        k, p = SCENARIOS[scenario_id]
        at = datetime.fromtimestamp(now - rng.uniform(0, HOURS * 3600), UTC)
        outcome: Outcome = "passed" if rng.random() < p else rng.choice(["failed", "error"])
        v = TrialVerdict(
            event_id=f"verdict:t{i}",
            trial_id=f"t{i}",
            run_id=f"run-{i % 3}",
            scenario_id=scenario_id,
            scenario_version="v1",
            session_id=f"s{i}",
            k=k,
            outcome=outcome,
            finished_at=at,
        )
        out.append(v)
        if rng.random() < 0.1:
            out.append(v)  # delivered twice
        if rng.random() < 0.1:
            other: Outcome = "failed" if outcome == "passed" else "passed"
            out.append(
                v.model_copy(update={"event_id": f"verdict:t{i}:2", "attempt": 2, "outcome": other})
            )
    return out


def undisturbed(verdicts: list[TrialVerdict]) -> dict[tuple[Any, ...], tuple[int, int, int, int]]:
    """(scenario, run or window, start) -> (k, passed, failed, errors), each trial counted
    once with its highest attempt."""
    final: dict[str, TrialVerdict] = {}
    for v in verdicts:
        if v.trial_id not in final or v.attempt > final[v.trial_id].attempt:
            final[v.trial_id] = v
    counts: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for v in final.values():
        assert v.finished_at is not None
        at = int(v.finished_at.timestamp())
        for scope in (("run", v.run_id), ("1h", at - at % 3600), ("1d", at - at % 86400)):
            c = counts[(v.scenario_id, *scope)]
            c[0] = v.k
            c[1 + ["passed", "failed", "error"].index(v.outcome)] += 1
    return {key: (c[0], c[1], c[2], c[3]) for key, c in counts.items()}


def scope_of(record: dict[str, Any]) -> tuple[Any, ...]:
    if record["run_id"] is not None:
        return (record["scenario_id"], "run", record["run_id"])
    start = int(datetime.fromisoformat(record["window_start"]).timestamp())
    return (record["scenario_id"], record["window"], start)


def figures(settings: Settings) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The last figure published for each scope."""
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, record, _ in read_topic(settings, Topic.SCENARIO_RELIABILITY):
        assert key == record["scenario_id"].encode()
        last[scope_of(record)] = record  # one scenario, one partition: log order
    return last


def off(
    last: dict[tuple[Any, ...], dict[str, Any]],
    expected: dict[tuple[Any, ...], tuple[int, int, int, int]],
) -> list[str]:
    """Every scope whose last figure is not the undisturbed count, and how."""
    wrong = []
    for scope, (k, c, f, e) in expected.items():
        r = last.get(scope)
        got = r and (r["k"], r["n"], r["passed"], r["failed"], r["errors"])
        if got != (k, c + f + e, c, f, e):
            wrong.append(f"{scope}: got {got}, want {(k, c + f + e, c, f, e)}")
    return wrong + [f"{scope}: not expected" for scope in set(last) - set(expected)]


def settled_figures(
    settings: Settings, expected: dict[tuple[Any, ...], tuple[int, int, int, int]]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Settled means every verdict was read and committed; the last figures are then on
    the topic. Read until they agree, for a while: a count lost for good never does."""
    last = figures(settings)
    deadline = time.monotonic() + 60
    while off(last, expected) and time.monotonic() < deadline:
        time.sleep(1.0)
        last = figures(settings)
    return last


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name.startswith("passk_scenario_")
    }


def test_sigkilled_aggregate_recovers_every_figure(settings: Settings, tmp_path: Path) -> None:
    publish_scenarios(
        settings,
        [
            scenario(id="steady", trials=3, alert={"min_pass_hat_k": 0.9, "min_trials": 20}),
            scenario(id="flaky", trials=5),
        ],
    )
    now = datetime.now(UTC).timestamp()
    verdicts = traffic(now)
    inputs = [(v.trial_id, v.model_dump_json().encode()) for v in verdicts]
    # The second half is sent while the worker is down, so its restart always has a backlog
    # to read after the crash, however fast the first worker was on a quiet machine.
    half = len(inputs) // 2
    produce(
        settings,
        Topic.TRIAL_VERDICTS,
        [("broken", b'{"type": "trial_verdict", "trial_id": 7')]  # unusable: a dead letter
        + inputs[:half],
    )
    expected = undisturbed(verdicts)

    port = free_port()
    # Batches of 100 (not 500): the kill then lands among many batches' writes in flight.
    env = isolated_env(settings, PASSK_METRICS_PORT=str(port), PASSK_AGGREGATE_BATCH_MAX="100")
    log = tmp_path / "aggregate.log"

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "services.cli", "worker", "aggregate"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def published() -> int:
        return len(read_topic(settings, Topic.SCENARIO_RELIABILITY))

    def counted() -> float:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        except OSError:  # not serving yet
            return 0.0
        return sum(
            s.value
            for f in text_string_to_metric_families(body.decode())
            for s in f.samples
            if s.name == "passk_aggregate_verdicts_total"
        )

    worker = start()
    try:
        # Killed mid-replay: a quarter of the verdicts read, far from all of them.
        wait_for(
            lambda: counted() >= len(verdicts) // 4,
            timeout=300,
            interval=0.2,
            what="a quarter of the verdicts counted",
        )
        worker.kill()  # SIGKILL: no shutdown, no final commit
        worker.wait(10)
        produce(settings, Topic.TRIAL_VERDICTS, inputs[half:])
        assert processor_status(["aggregate"], settings)[0].lag, "no backlog for the restart"
        worker = start()
        try:
            # 300 s, well under the test's own timeout, so that a restart that never drains
            # fails here with what the worker was doing, not as a bare pytest-timeout.
            wait_for(
                lambda: processor_status(["aggregate"], settings)[0].settled,
                timeout=300,
                interval=1.0,
                what=f"the restarted aggregate drained its backlog ({log})",
            )
        except AssertionError as exc:
            status = processor_status(["aggregate"], settings)[0]
            raise AssertionError(
                f"{exc}; status {status}; the worker's threads:\n"
                f"{stacks_of(worker.pid)}\nits asyncio tasks:\n"
                f"{tasks_of(worker.pid, log)}"
            ) from None

        last = settled_figures(settings, expected)
        if off(last, expected):
            notes = {
                s.labels["note"]: s.value
                for f in text_string_to_metric_families(
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                    .read()
                    .decode()
                )
                for s in f.samples
                if s.name == "passk_aggregate_verdicts_total"
            }
            try:
                account = "\n".join(
                    table_account(
                        changelog_state(settings),
                        verdicts,
                        {w.split("'")[1] for w in off(last, expected) if "'" in w},
                    )
                )
            except Exception as exc:  # the failure below matters more than its account
                account = f"(the table could not be read: {exc!r})"
            pytest.fail(
                f"figures off after the restart: {off(last, expected)}; verdicts counted "
                f"by note since the restart: {notes}; sent {len(inputs)} verdicts "
                f"of {TRIALS} trials (log: {log}); the table:\n{account}"
            )
        assert set(last) == set(expected)
        for scope, (k, c, failed, errors) in expected.items():
            r = last[scope]
            n = c + failed + errors
            assert (r["k"], r["n"], r["passed"], r["failed"], r["errors"]) == (
                k,
                n,
                c,
                failed,
                errors,
            ), scope
            want_hat = comb(c, k) / comb(n, k) if n >= k else None
            assert r["pass_hat_k"] == pytest.approx(want_hat), scope
            assert r["pass_hat_k_lower"] == pytest.approx(beta.ppf(0.05, c + 1, n - c + 1) ** k)
            assert r["pass_hat_k_upper"] == pytest.approx(beta.ppf(0.95, c + 1, n - c + 1) ** k)
        # What a next restart recovers from agrees too: every trial remembered, and every
        # change a memory numbers stands in its bucket.
        assert table_account(changelog_state(settings), verdicts, set(SCENARIOS)) == []

        dead = [v for _, v, _ in read_topic(settings, Topic.DEAD_LETTERS)]
        # (a SIGKILL before its offset was committed may send it twice, never lose it)
        assert {(d["processor"], d["reason"]) for d in dead} == {("aggregate", "invalid_json")}

        # The gauges after the restart: each scenario's most recent hour and day, no other.
        def gauges_ready() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            got = scrape(port)
            return (
                got
                if ("passk_scenario_alert_min_trials", (("scenario", "flaky"),)) in got
                else None
            )

        metrics = wait_for(gauges_ready, timeout=60, what="the alert targets on /metrics")
        for scenario_id in SCENARIOS:
            for size in ("1h", "1d"):
                start_s = max(s[2] for s in expected if s[:2] == (scenario_id, size))
                k, c, failed, errors = expected[(scenario_id, size, start_s)]
                labels = (("scenario", scenario_id), ("window", size))
                n = c + failed + errors
                assert metrics[("passk_scenario_trials", labels)] == n
                if n < k:  # the newest window may hold fewer than k trials: no pass^k yet
                    assert ("passk_scenario_pass_hat_k", labels) not in metrics
                else:
                    assert metrics[("passk_scenario_pass_hat_k", labels)] == pytest.approx(
                        comb(c, k) / comb(n, k)
                    )
        windows = {
            dict(labels)["window"] for (name, labels) in metrics if name == "passk_scenario_trials"
        }
        assert windows == {"1h", "1d"}
        assert sum(1 for (name, _) in metrics if name == "passk_scenario_trials") == 4
        assert metrics[("passk_scenario_alert_min_pass_hat_k", (("scenario", "steady"),))] == 0.9
        assert metrics[("passk_scenario_alert_min_trials", (("scenario", "steady"),))] == 20
        assert metrics[("passk_scenario_alert_min_pass_hat_k", (("scenario", "flaky"),))] == 0.8

        # Killed once more with nothing left to read: the gauges can only come back from
        # the recovered table. (Repeats the first restart re-forwarded may still be in
        # flight: wait until the figures stop coming and every offset is committed.)
        def quiet() -> int | None:
            before = published()
            time.sleep(3)
            settled = processor_status(["aggregate"], settings)[0].settled
            return before if settled and published() == before else None

        sent = wait_for(quiet, timeout=300, interval=1.0, what="the aggregate quiet and settled")
        worker.kill()
        worker.wait(10)
        worker = start()
        shown = {key: v for key, v in metrics.items() if key[0] == "passk_scenario_trials"}

        def restored() -> bool:
            try:
                got = scrape(port)
            except OSError:  # not serving yet
                return False
            return {key: v for key, v in got.items() if key[0] == "passk_scenario_trials"} == shown

        wait_for(restored, timeout=180, interval=1.0, what="the gauges restored after restart")
        # nothing was read or recomputed to get them back
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        read_since = [
            s.value
            for f in text_string_to_metric_families(body.decode())
            for s in f.samples
            if s.name == "passk_aggregate_verdicts_total"
        ]
        assert sum(read_since) == 0, read_since
        assert published() == sent
    finally:
        stop(worker)


# A broker of its own, started twice (about 80 s each on a busy machine): 1 to 5 min.
@pytest.mark.timeout(900)
def test_an_outage_past_the_producer_timeout_loses_no_figure(tmp_path: Path) -> None:
    """The broker gone longer than the producer's timeout (PASSK_PRODUCER_TIMEOUT_S, 3 s
    here, 20 min by default) in the middle of a 3,600-verdict backlog. The idempotent
    producer retries its batches in order until the broker is back; a record it had to
    give up on (no room in its buffer for 3 s) stops the worker before its next commit,
    and its restart (what its supervisor does; this test plays that part) reads the rest
    again. Either way, every verdict is counted once: the same figures as undisturbed, and
    a table whose every change its memories number is in its bucket."""
    with own_kafka(tmp_path / "kafka") as kafka:
        settings = make_settings(kafka.bootstrap, tmp_path)
        publish_scenarios(
            settings, [scenario(id="steady", trials=3), scenario(id="flaky", trials=5)]
        )
        verdicts = traffic(datetime.now(UTC).timestamp())
        inputs = [(v.trial_id, v.model_dump_json().encode()) for v in verdicts]
        expected = undisturbed(verdicts)
        env = isolated_env(
            settings,
            PASSK_METRICS_PORT=str(free_port()),
            PASSK_PRODUCER_TIMEOUT_S="3",
            PASSK_AGGREGATE_BATCH_MAX="100",
        )
        log = tmp_path / "aggregate.log"
        starts: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            with open(log, "ab") as out:
                starts.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "services.cli", "worker", "aggregate"],
                        env=env,
                        cwd=ROOT,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

        def restarted() -> bool:  # the supervisor's part: a worker that stopped starts again
            if starts[-1].poll() is not None:
                start()
            return False

        # The whole backlog first: the outage then falls in the middle of it, while the
        # worker holds fetched verdicts whose outputs it cannot deliver.
        produce(settings, Topic.TRIAL_VERDICTS, inputs)
        start()
        try:
            wait_for(
                lambda: len(read_topic(settings, Topic.SCENARIO_RELIABILITY)) > 0,
                timeout=300,
                interval=0.2,
                what="the first figures",
            )
            kafka.kill(1)
            # Past the producer's 3 s: a record with no room in its buffer is given up.
            time.sleep(15)
            kafka.up()
            wait_for(
                lambda: (
                    restarted()
                    or (
                        starts[-1].poll() is None
                        and processor_status(["aggregate"], settings)[0].settled
                    )
                ),
                timeout=300,
                interval=1.0,
                what=f"the aggregate settled after the outage ({log})",
            )
            last = settled_figures(settings, expected)
            told = log.read_text(errors="replace")
            wrong = off(last, expected)
            scopes = sum(1 for scope in expected if scope in last)
            # One line per run for the record (docs/notes/incidents.md has ten of them).
            print(
                f"\nOUTAGE-RUN verdicts={len(verdicts)} scopes={scopes}/{len(expected)} "
                f"wrong={len(wrong)} starts={len(starts)} "
                f"commits_refused={told.count('not committing: a record')} "
                f"sends_refused={told.count('not sending: a record')} "
                f"undelivered_logged={told.count('a record was not delivered:')}"
            )
            account = table_account(changelog_state(settings), verdicts, set(SCENARIOS))
            assert not wrong, (wrong, account, told[-3000:])
            assert account == []
        finally:
            for worker in starts:
                stop(worker)
