"""What became of every send a producer was given: acknowledged, failed, or still waiting,
in the order they were sent, so that a command can say which was the first one not
delivered and how many were not, and never wait for the broker without a deadline.

Pure bookkeeping (no Kafka here): the producer's callbacks report into a `Ledger` from
the client's I/O thread, and the command's thread waits on it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


def describe(exc: BaseException) -> str:
    """An error in one line, its type named once (kafka-python's texts often name it)."""
    text = str(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}"


@dataclass(frozen=True)
class Undelivered:
    ref: str  # what was being sent: "line 12", a trial id, an event id
    topic: str
    why: str

    def __str__(self) -> str:
        return f"{self.ref}: {self.topic}: {self.why}"


@dataclass(frozen=True)
class DeliveryReport:
    """Acknowledged sends per topic, and every send not delivered, first sent first."""

    acked: dict[str, int] = field(default_factory=dict)
    undelivered: tuple[Undelivered, ...] = ()

    @property
    def delivered(self) -> int:
        return sum(self.acked.values())

    @property
    def first_undelivered(self) -> Undelivered | None:
        return self.undelivered[0] if self.undelivered else None


class Ledger:
    """Every send from the moment it is handed to the producer until it is acknowledged or
    has failed. A send still waiting when the report is taken counts as not delivered:
    the broker has not said it has it, and nobody waits any longer."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._changed = threading.Condition()
        self._next = 0
        self._waiting: dict[int, tuple[str, str]] = {}  # send number -> (ref, topic)
        self._failed: dict[int, Undelivered] = {}
        self._acked: Counter[str] = Counter()

    def sent(self, ref: str, topic: str) -> int:
        """A send handed to the producer; its number, for `acknowledged` or `failed`."""
        with self._changed:
            number = self._next
            self._next += 1
            self._waiting[number] = (ref, topic)
            return number

    def acknowledged(self, number: int) -> None:
        with self._changed:
            ref_topic = self._waiting.pop(number, None)
            if ref_topic is not None:
                self._acked[ref_topic[1]] += 1
            self._changed.notify_all()

    def failed(self, number: int, why: str) -> None:
        with self._changed:
            ref_topic = self._waiting.pop(number, None)
            if ref_topic is not None:
                self._failed[number] = Undelivered(ref_topic[0], ref_topic[1], why)
            self._changed.notify_all()

    def refused(self, ref: str, topic: str, why: str) -> None:
        """A send that never reached the producer's queue (serialisation, metadata)."""
        self.failed(self.sent(ref, topic), why)

    def give_up(self, why: str) -> None:
        """Count every send still waiting as not delivered, for `why`; what the producer
        says of them afterwards (the failures of a forced close) changes nothing."""
        with self._changed:
            for number, (ref, topic) in self._waiting.items():
                self._failed[number] = Undelivered(ref, topic, why)
            self._waiting.clear()
            self._changed.notify_all()

    @property
    def waiting(self) -> int:
        with self._changed:
            return len(self._waiting)

    def wait_settled(self, timeout_s: float) -> bool:
        """Block until no send is waiting, for at most `timeout_s`; True when none is.
        A signal (SIGINT) still interrupts the wait: it is a plain condition wait."""
        deadline = self._clock() + max(timeout_s, 0.0)
        with self._changed:
            while self._waiting:
                left = deadline - self._clock()
                if left <= 0:
                    return False
                # In slices: a long single wait would only hear a signal at its end on
                # some platforms, and the clock may be a test's.
                self._changed.wait(min(left, 0.5))
            return True

    def report(self, still_waiting: str) -> DeliveryReport:
        """Where every send stands now; one still waiting is not delivered, `still_waiting`
        says why (e.g. "not acknowledged within 150 s")."""
        with self._changed:
            undelivered = dict(self._failed)
            for number, (ref, topic) in self._waiting.items():
                undelivered[number] = Undelivered(ref, topic, still_waiting)
            return DeliveryReport(
                dict(self._acked), tuple(undelivered[n] for n in sorted(undelivered))
            )
