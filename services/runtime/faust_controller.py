"""A fix for faust-streaming 0.15.3's topic declaration on a cluster that has lost a
broker (applied once, on import).

Before declaring a topic (every worker declares its leader topic when it starts) Faust
asks for the controller: it sends a metadata request to the first broker of aiokafka's
metadata, and sends the CreateTopics request to the controller id in the answer. A
broker lost for good stays in the cluster's metadata (Kafka 4.1 lists fenced brokers),
and the brokers' order there is a set's order, different in every process: when the lost
broker came first, or (until the controller fences it, 9 s) was named as the controller,
the worker exited with NodeNotReadyError at start-up (tests/e2e/test_cluster.py, the
third gate worker started after the loss).

The fix asks every broker in turn, skipping one that does not answer, and returns the
first controller id that accepts a connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from services.runtime.faust_fixes import require_patched_version


async def _get_controller_node(
    self: Any, owner: Any, client: Any, timeout: int = 30000
) -> int | None:
    last: BaseException | None = None
    for broker in sorted(client.cluster.brokers(), key=lambda b: b.nodeId):
        if broker.nodeId is None:
            raise faust_aiokafka.NotReady("Not connected to Kafka Broker")
        request = (faust_aiokafka.MetadataRequest_v1([])
                   if faust_aiokafka._AIOKAFKA_HAS_API_VERSION
                   else faust_aiokafka.MetadataRequest([]))
        try:
            wait_result = await owner.wait(client.send(broker.nodeId, request), timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # this broker does not answer: ask the next one
            last = exc
            continue
        if wait_result.stopped:
            owner.log.info("Shutting down - skipping creation.")
            return None
        controller: int = wait_result.result.controller_id
        if await client.ready(controller):
            return controller
        last = faust_aiokafka.NotReady(f"controller {controller} does not answer")
    raise last or Exception("Controller node not found")


def apply() -> None:

    require_patched_version("faust_controller.py")
    faust_aiokafka.Transport._get_controller_node = _get_controller_node  # type: ignore[method-assign]


apply()
