"""How a processor declares its Prometheus metrics: one line of name, help and labels per
metric, made on the registry the set is built with (tests pass a fresh
`CollectorRegistry`, workers the process-wide default).

    class GateMetrics(MetricSet):
        sessions_missing = counter("passk_gate_sessions_missing_total", "Trials whose ...")

    GateMetrics(registry).sessions_missing.inc()

Names follow prometheus/client_python conventions: `passk_` namespace, base units,
counters ending in `_total`, low-cardinality labels only (never trial or session ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar, overload

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)


class Declared(Generic[M]):
    """A metric of a MetricSet: what to make; each set's instance holds the made one."""

    def __init__(
        self,
        kind: type[M],
        name: str,
        documentation: str,
        labels: Sequence[str],
        options: dict[str, Any],
    ) -> None:
        self.kind: type[M] = kind
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.options = options
        self.attribute = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def make(self, registry: CollectorRegistry) -> M:
        return self.kind(
            self.name, self.documentation, self.labels, registry=registry, **self.options
        )

    @overload
    def __get__(self, instance: None, owner: type) -> Declared[M]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> M: ...
    def __get__(self, instance: object | None, owner: type) -> Declared[M] | M:
        if instance is None:
            return self
        made: M = instance.__dict__[self.attribute]
        return made


def counter(name: str, documentation: str, *labels: str) -> Declared[Counter]:
    return Declared(Counter, name, documentation, labels, {})


def gauge(name: str, documentation: str, *labels: str) -> Declared[Gauge]:
    return Declared(Gauge, name, documentation, labels, {})


def histogram(
    name: str, documentation: str, *labels: str, buckets: Sequence[float]
) -> Declared[Histogram]:
    return Declared(Histogram, name, documentation, labels, {"buckets": tuple(buckets)})


class MetricSet:
    """Makes every metric its class declares on `registry`, once per instance."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        for cls in reversed(type(self).__mro__):
            for declared in vars(cls).values():
                if isinstance(declared, Declared):
                    self.__dict__[declared.attribute] = declared.make(registry)
