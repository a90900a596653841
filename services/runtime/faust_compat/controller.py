"""A fix for faust-streaming 0.15.3's topic declaration on a cluster that has lost a
broker (installed by `apply`).

Before declaring a topic (every worker declares its leader topic when it starts) Faust
asks for the controller: it sends a metadata request to the first broker of aiokafka's
metadata, and sends the CreateTopics request to the controller id in the answer. A
broker lost for good stays in the cluster's metadata (Kafka 4.1 lists fenced brokers),
and the brokers' order there is a set's order, different in every process: when the lost
broker came first, or (until the controller fences it, 9 s) was named as the controller,
the worker exited with NodeNotReadyError at start-up (tests/e2e/test_cluster.py, the
third gate worker started after the loss).

The fix asks every broker in turn, skipping one that does not answer, and returns the
first controller id that accepts a connection. Each broker is asked by Faust's own
lookup, shown a cluster of that one broker: the request, the shutdown check and the
answer read are the library's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from services.runtime.faust_compat.patching import Patch

_ORIGINAL: dict[str, Any] = {}  # faust's own _get_controller_node, once installed


class _OneBroker:
    """An aiokafka client seen as a cluster of one of its brokers: what Faust's lookup
    reads of a client is `cluster.brokers()` and `send`."""

    def __init__(self, client: Any, broker: Any) -> None:
        self._client = client
        self._broker = broker
        self.cluster = self

    def brokers(self) -> list[Any]:
        return [self._broker]

    def send(self, node_id: int, request: Any) -> Any:
        return self._client.send(node_id, request)


async def _get_controller_node(
    self: Any, owner: Any, client: Any, timeout: int = 30000
) -> int | None:
    original = _ORIGINAL.get("lookup", faust_aiokafka.Transport._get_controller_node)
    last: BaseException | None = None
    for broker in sorted(client.cluster.brokers(), key=lambda b: b.nodeId):
        if broker.nodeId is None:
            raise faust_aiokafka.NotReady("Not connected to Kafka Broker")
        try:
            controller = await original(self, owner, _OneBroker(client, broker), timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # this broker does not answer: ask the next one
            last = exc
            continue
        if controller is None:  # shutting down (Faust logged it and skips the creation)
            return None
        if await client.ready(controller):
            return int(controller)
        last = faust_aiokafka.NotReady(f"controller {controller} does not answer")
    raise last or Exception("Controller node not found")


def _install() -> None:
    """Wrap faust's controller lookup."""
    _ORIGINAL["lookup"] = faust_aiokafka.Transport._get_controller_node
    faust_aiokafka.Transport._get_controller_node = _get_controller_node  # type: ignore[method-assign]


PATCH = Patch(_install)
