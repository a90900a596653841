"""The one fix passk puts on kafka-python (docs/faust.md, patch 9), installed by
`kafka_client_kwargs`, which every kafka-python client passk makes takes its arguments
from; at most once per process, and only on the release it was written for.

kafka-python 3.0.12 reads a socket until it would block; when the bytes it read end in
the peer's close, it drops them and reports only the close. A broker refusing a SASL
password sends its error response and closes the connection right after it: a client
that reads late (a loaded machine) gets both in one read, loses the response, and sees
"socket disconnected" instead of "authentication failed", attempt after attempt, until
its bootstrap times out as if the broker were down. The fix hands the bytes on first and
reports the close on the next read."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

WRITTEN_FOR = "3.0.12"  # requirements.lock pins it; the tests run its real read loop
_PENDING = "_passk_close_after_data"
_installed = False


def delivering_data_before_close(
    sock_recv: Callable[[Any], tuple[bytes, BaseException | None]],
) -> Callable[[Any], tuple[bytes, BaseException | None]]:
    """A transport's `_sock_recv` that returns what it read before an error, and the error
    on its next call (the read loop hands the bytes to the protocol, then reads again)."""

    @functools.wraps(sock_recv)
    def first_the_data(self: Any) -> tuple[bytes, BaseException | None]:
        pending = getattr(self, _PENDING, None)
        if pending is not None:
            return b"", pending
        data, error = sock_recv(self)
        if error is not None and data:
            setattr(self, _PENDING, error)
            return data, None
        return data, error

    first_the_data.__wrapped_by_passk__ = True  # type: ignore[attr-defined]
    return first_the_data


def install() -> bool:
    """Install the fix on the release it was written for; True when it is in place."""
    global _installed
    if _installed:
        return True
    try:
        from kafka.net import transport
        from kafka.version import __version__
    except ImportError:  # kafka-python 2.x: another network layer, not this bug
        return False
    if __version__ != WRITTEN_FOR:
        log.debug(
            "kafka-python %s: the read fix written for %s is not installed",
            __version__,
            WRITTEN_FOR,
        )
        return False
    for cls in (transport.KafkaTCPTransport, transport.KafkaSSLTransport):
        if "_sock_recv" in vars(cls):
            cls._sock_recv = delivering_data_before_close(cls._sock_recv)
    _installed = True
    return True


def installed() -> bool:
    return _installed
