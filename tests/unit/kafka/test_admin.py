"""The replication a cluster of N brokers gets."""

from __future__ import annotations

import pytest

from services.kafka.admin import min_insync_for, replication_for


@pytest.mark.parametrize(
    ("brokers", "configured", "replicas", "min_isr"),
    [(1, 0, 1, 1), (2, 0, 2, 1), (3, 0, 3, 2), (5, 0, 3, 2), (3, 1, 1, 1), (1, 2, 2, 1)],
)
def test_replication_follows_the_cluster_unless_configured(
    brokers: int, configured: int, replicas: int, min_isr: int
) -> None:
    assert replication_for(brokers, configured) == replicas
    assert min_insync_for(replicas) == min_isr
