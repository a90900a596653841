"""The consumer snapshot a worker logs on SIGUSR2, read from the real faust-streaming
0.15.3 consumer of an app that is built but not started."""

from __future__ import annotations

from pathlib import Path

from faust.types import TP

from services.contract.settings import Settings
from services.runtime.app import make_app
from services.runtime.faust_compat.internals import consumer_state


def test_the_snapshot_names_each_part_and_groups_partitions_by_topic(tmp_path: Path) -> None:
    settings = Settings(PASSK_TOPIC_PREFIX="snap.", PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    app = make_app("snapshot", settings)
    consumer = app.consumer
    consumer.pause_partitions({TP("snap.a", 1), TP("snap.a", 0), TP("snap.b", 3)})
    state = consumer_state(app)
    lines = dict(line.strip().split(": ", 1) for line in state.splitlines())
    assert list(lines) == [
        "flow_active",
        "in_recovery",
        "recovery_in_progress",
        "assigned",
        "active",
        "paused",
        "buffered",
        "read_offset",
        "committed",
        "client",
        "client_buffered",
    ]
    assert lines["paused"] == "{'snap.a': [0, 1], 'snap.b': [3]}"
    assert lines["in_recovery"] == "False"
    # an app not started has no assignment to read: said, not raised
    assert lines["assigned"] == "{}" or lines["assigned"].startswith("(unreadable: ")
    # nor has it an aiokafka client yet, whose own partition states come after Faust's
    assert lines["client"].startswith("(unreadable: ConsumerNotStarted")
