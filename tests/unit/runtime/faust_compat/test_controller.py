"""Faust asks a broker from aiokafka's metadata for the controller before declaring a
topic; a broker lost for good stays in that metadata. The patched lookup skips a broker
that does not answer and a named controller that does not accept a connection."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from services.runtime.faust_compat.controller import _get_controller_node


@dataclass(frozen=True)
class Broker:
    nodeId: int  # aiokafka's name


@dataclass
class Answer:
    stopped: bool
    result: Any


class Cluster:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def brokers(self) -> set[Broker]:
        return {Broker(i) for i in self.ids}


class Client:
    """Brokers in `lost` refuse connections; the others name `controller`."""

    def __init__(self, ids: list[int], lost: set[int], controllers: list[int]) -> None:
        self.cluster = Cluster(ids)
        self.lost = lost
        self.controllers = list(controllers)
        self.asked: list[int] = []

    async def send(self, node_id: int, request: Any) -> Any:
        self.asked.append(node_id)
        if node_id in self.lost:
            raise KafkaConnectionError(f"node {node_id}: 111 ECONNREFUSED")

        @dataclass
        class Metadata:
            controller_id: int

        return Metadata(self.controllers.pop(0))

    async def ready(self, node_id: int) -> bool:
        return node_id not in self.lost


class Owner:
    log = None

    async def wait(self, coro: Any, timeout: float) -> Answer:
        return Answer(False, await coro)


def lookup(client: Client) -> int | None:
    return asyncio.run(_get_controller_node(None, Owner(), client))


def test_a_lost_broker_listed_first_is_skipped() -> None:
    client = Client([1, 2, 3], lost={1}, controllers=[3])
    assert lookup(client) == 3
    assert client.asked == [1, 2]


def test_a_named_controller_that_does_not_answer_is_not_returned() -> None:
    # until the lost broker is fenced, a KRaft broker may name it as the controller
    client = Client([1, 2, 3], lost={2}, controllers=[2, 3])
    assert lookup(client) == 3


def test_no_broker_answering_fails_with_the_last_error() -> None:
    with pytest.raises(KafkaConnectionError):
        lookup(Client([1, 2], lost={1, 2}, controllers=[]))
