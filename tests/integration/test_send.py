"""The commands' own sends (services/kafka/send.py: labels, calibrations) on the real
broker: every record acknowledged before it returns, each key's records in the order sent,
and a broker that does not answer is an error, not a wait."""

from __future__ import annotations

import time

import pytest
from kafka.errors import KafkaError

from services.contract.settings import Settings
from services.contract.topics import Topic
from services.kafka.send import send_all
from tests.support import free_ports, read_topic

pytestmark = pytest.mark.integration


def test_every_record_on_the_topic_each_key_in_the_order_sent(settings: Settings) -> None:
    sent = [(f"judge-{i % 3}", i) for i in range(30)]
    send_all(settings, Topic.JUDGE_CALIBRATIONS, [(k, f'{{"n": {n}}}'.encode()) for k, n in sent])
    # read at once, no min_count: send_all returned only once the broker had them all
    got = [(k.decode(), v["n"]) for k, v, _ in read_topic(settings, Topic.JUDGE_CALIBRATIONS) if k]
    assert sorted(got) == sorted(sent)
    for key in {k for k, _ in sent}:
        assert [n for k, n in got if k == key] == [n for k, n in sent if k == key]


def test_a_broker_that_does_not_answer_raises_within_its_bound(settings: Settings) -> None:
    nowhere = settings.model_copy(update={"kafka_bootstrap_servers": f"127.0.0.1:{free_ports(1)}"})
    started = time.monotonic()
    with pytest.raises(KafkaError):
        send_all(nowhere, Topic.LABELS, [("t-1", b"{}")])
    assert time.monotonic() - started < 60
