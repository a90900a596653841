"""The kafka-python read fix, on the installed wheel's real transport and read loop over a
real socket pair: a response that arrives with the peer's close is lost unpatched and
handed on patched, with the close reported after it."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError
from kafka.net import transport
from kafka.version import __version__

from services.kafka import kafka_python_compat
from services.kafka.kafka_client import kafka_client_kwargs
from services.kafka.kafka_python_compat import delivering_data_before_close
from tests.unit.fakes import default_settings

ROOT = Path(__file__).resolve().parents[3]
RESPONSE = b"\x00\x00\x00\x2a an error response a broker sends just before it closes"


class Net:
    """The transport's event loop, reduced to what its read loop asks of it."""

    async def wait_read(self, sock: socket.socket) -> None:
        return None

    def unregister_event(self, sock: socket.socket, events: int) -> None:
        pass

    def cancel(self, task: Any) -> None:
        pass


class Protocol:
    _sensors = None

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.lost: list[BaseException | None] = []

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def connection_lost(self, error: BaseException | None) -> None:
        self.lost.append(error)


def original(cls: type) -> Any:
    return getattr(vars(cls)["_sock_recv"], "__wrapped__", vars(cls)["_sock_recv"])


def read_until_closed(cls: type, recv: Any) -> Protocol:
    """Run the transport's own read loop on a socket whose peer wrote RESPONSE then
        closed, both before the first read (a client that reads late). The TLS transport reads
    the plain socket here: its `_sock_recv` differs only in the TLS errors it waits out."""
    ours, peer = socket.socketpair()
    peer.sendall(RESPONSE)
    peer.close()
    ours.setblocking(False)
    reading_cls = type("Reading", (cls,), {"_sock_recv": recv})
    reading = reading_cls.__new__(reading_cls)
    # The TCP transport's constructor for both: the TLS one's would wrap the socket, and
    # what is under test reads whatever `recv` returns, bytes then b"" at the close.
    transport.KafkaTCPTransport.__init__(reading, Net(), ours)
    protocol = Protocol()
    reading._protocol, reading._read = protocol, True
    asyncio.run(asyncio.wait_for(reading._read_from_sock(), 5))
    return protocol


@pytest.mark.parametrize("cls", [transport.KafkaTCPTransport, transport.KafkaSSLTransport])
def test_unpatched_the_response_sent_with_the_close_is_lost(cls: type) -> None:
    protocol = read_until_closed(cls, original(cls))
    assert protocol.received == []  # the bug the fix is for; when this fails, look upstream
    assert [type(e) for e in protocol.lost] == [KafkaConnectionError]


@pytest.mark.parametrize("cls", [transport.KafkaTCPTransport, transport.KafkaSSLTransport])
def test_patched_the_response_is_handed_on_then_the_close(cls: type) -> None:
    protocol = read_until_closed(cls, delivering_data_before_close(original(cls)))
    assert b"".join(protocol.received) == RESPONSE
    assert [type(e) for e in protocol.lost] == [KafkaConnectionError]
    assert "socket disconnected" in str(protocol.lost[0])


def test_written_for_the_locked_release() -> None:
    assert __version__ == kafka_python_compat.WRITTEN_FOR
    locked = re.search(
        r"^kafka-python==(\S+)$", (ROOT / "requirements.lock").read_text(), re.MULTILINE
    )
    assert locked is not None and locked.group(1) == kafka_python_compat.WRITTEN_FOR


def test_every_kafka_python_client_gets_it_once() -> None:
    kafka_client_kwargs(default_settings())
    assert kafka_python_compat.installed()
    for cls in (transport.KafkaTCPTransport, transport.KafkaSSLTransport):
        recv = vars(cls)["_sock_recv"]
        assert getattr(recv, "__wrapped_by_passk__", False)
        assert not getattr(recv.__wrapped__, "__wrapped_by_passk__", False)  # not twice
    kafka_client_kwargs(default_settings())
    assert not getattr(
        vars(transport.KafkaSSLTransport)["_sock_recv"].__wrapped__, "__wrapped_by_passk__", False
    )
