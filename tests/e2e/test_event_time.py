"""One producer with a wrong clock must not switch monitoring off (issue 21, item 1): the
red team's hostile input, end to end, every processor its own worker process.

6 trials, then one dated 2099, then 6 more, through `passk replay`, and a trial dated
1970. Before: the 2099 trial moved the aggregate's watermark to 2099; the gauges jumped
to the 2099 window and stayed there, the later 6 were counted `late`, nowhere (no window,
no run record for their run although `passk report` showed them), and the 1970 trial was
in no run record; the watermark lived in a changelogged table, so a restart kept it."""

from __future__ import annotations

import base64
import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.contract.codec import encode
from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.e2e.conftest import Pipeline
from tests.support import publish_scenarios, read_topic, wait_for
from tests.unit.factories import conversation, scenario, session

pytestmark = pytest.mark.e2e
SCENARIO = "forward-dated"
JUDGES = [{"id": "said_goodbye", "kind": "regex", "pattern": "Goodbye", "must_match": True}]


# The present trials' event time: the start of the hour the test began in, so that every
# one of them falls in one 1h window even when the test runs across the hour (a trial
# dated by the clock at 11:00:30 opened a new window of one trial, and the gauge of the
# newest window read 1 where the test waited for 13).
PRESENT = datetime.now(UTC).replace(minute=0, second=1, microsecond=0)


def trial(trial_id: str, run: str, at: datetime = PRESENT) -> list[bytes]:
    return [
        encode(conversation(trial_id, run_id=run, scenario_id=SCENARIO, occurred_at=at)),
        encode(session(trial_id, occurred_at=at)),
    ]


def replay(pipeline: Pipeline, path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")
    done = pipeline.passk("replay", str(path))
    assert done.returncode == 0, done.stderr


def gauge(pipeline: Pipeline, name: str, window: str = "1h") -> float | None:
    port = pipeline.metrics_port("aggregate")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:  # not serving (yet)
        return None
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and s.labels == {"scenario": SCENARIO, "window": window}:
                return s.value
    return None


def records(settings: Settings) -> dict[str, dict]:
    """The current figure of each run, and of each window as 'window:start'."""
    out: dict[str, dict] = {}
    for _, r, _ in read_topic(settings, Topic.SCENARIO_RELIABILITY):
        if r["scenario_id"] == SCENARIO:
            scope = r["run_id"] or f"{r['window']}:{r['window_start']}"
            out[scope] = r  # the last record of a scope is its current figure
    return out


def report_n(pipeline: Pipeline, run_id: str) -> int:
    done = pipeline.passk("report", "--run-id", run_id, "--json")
    assert done.returncode in (0, 1), done.stderr
    (row,) = json.loads(done.stdout)["scenarios"]
    return int(row["n"])


def test_a_trial_dated_2099_blinds_nothing_and_one_dated_1970_counts(
    pipeline: Pipeline, settings: Settings, tmp_path: Path
) -> None:
    publish_scenarios(settings, [scenario(id=SCENARIO, judges=JUDGES)])
    first = [line for i in range(6) for line in trial(f"a{i}", "run-1")]
    bad = trial("from-2099", "run-1", datetime(2099, 1, 1, tzinfo=UTC))
    later = [line for i in range(6) for line in trial(f"b{i}", "run-2")]
    replay(pipeline, tmp_path / "hostile.jsonl", first + bad + later)
    wait_for(
        lambda: gauge(pipeline, "passk_scenario_trials") == 12,
        timeout=180,
        interval=1.0,
        what="the present window's gauge at 12",
    )
    pipeline.wait_settled()
    replay(
        pipeline,
        tmp_path / "epoch.jsonl",
        trial("from-1970", "run-3", datetime(1970, 1, 1, tzinfo=UTC)),
    )
    wait_for(
        lambda: "run-3" in records(settings),
        timeout=120,
        interval=1.0,
        what="a run record for the 1970 trial's run",
    )
    pipeline.wait_settled()

    def check() -> None:
        now = records(settings)
        assert {run: now[run]["n"] for run in ("run-1", "run-2", "run-3")} == {
            "run-1": 6,
            "run-2": 6,
            "run-3": 1,
        }
        windows = {
            datetime.fromisoformat(r["window_start"]): r["n"]
            for scope, r in now.items()
            if scope.startswith("1h:")
        }
        # only present windows (two, if the test ran across an hour): none in 2099 or 1970
        assert all(
            abs((start - datetime.now(UTC)).total_seconds()) < 2 * 3600 for start in windows
        ), windows
        assert sum(windows.values()) == 12, windows
        assert gauge(pipeline, "passk_scenario_trials") == 12
        # run scope equals `passk report`
        assert [report_n(pipeline, run) for run in ("run-1", "run-2", "run-3")] == [6, 6, 1]

    check()
    letters = {
        (
            base64.b64decode(d["key_b64"]).decode(),
            d["source_topic"].rsplit(".", 2)[-2],
            d["processor"],
        ): d
        for _, d, _ in read_topic(settings, Topic.DEAD_LETTERS)
    }
    assert set(letters) == {
        ("s-from-2099", "conversation-finished", "gate"),
        ("s-from-2099", "conversation-finished", "judge"),
        ("s-from-2099", "session-persisted", "gate"),
    }
    for d in letters.values():
        assert d["reason"] == "occurred_at_in_future" and "2099-01-01" in d["detail"]
    verdicts = {v["trial_id"] for _, v, _ in read_topic(settings, Topic.TRIAL_VERDICTS)}
    assert "from-2099" not in verdicts and len(verdicts) == 13

    # A crash and a restart of the aggregate: the same figures and gauges, and it counts on.
    pipeline.kill("aggregate")
    pipeline.start_worker("aggregate")
    wait_for(
        lambda: gauge(pipeline, "passk_scenario_trials") == 12,
        timeout=120,
        interval=1.0,
        what="the gauge restored after the restart",
    )
    check()
    replay(pipeline, tmp_path / "after.jsonl", trial("c0", "run-4"))
    try:
        wait_for(
            lambda: gauge(pipeline, "passk_scenario_trials") == 13,
            timeout=120,
            interval=1.0,
            what="a present trial counted after the restart",
        )
    except AssertionError as exc:  # upstream late, or the restarted aggregate stuck?
        verdict = [
            v["outcome"]
            for _, v, _ in read_topic(settings, Topic.TRIAL_VERDICTS)
            if v["trial_id"] == "c0"
        ]
        raise AssertionError(
            f"{exc}\nc0's verdict: {verdict}\n{pipeline.explain('aggregate')}"
        ) from None
    assert records(settings)["run-4"]["n"] == 1
