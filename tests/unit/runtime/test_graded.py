"""The memory of graded trials: on RocksDB, expired without a scan, bounded in RAM."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import topic_configs
from services.runtime.graded import ROCKSDB_OPTIONS, fresh


def test_a_marker_is_fresh_only_within_the_retention() -> None:
    assert fresh(1000.0, 1000.0 + 59.0, 60.0)
    assert not fresh(1000.0, 1000.0 + 60.0, 60.0)
    assert not fresh(None, 1000.0, 60.0)


def test_graded_changelogs_are_compacted_and_expire_with_the_retention() -> None:
    settings = Settings(PASSK_DEDUP_RETENTION_S=3600)
    for processor in ("gate", "verdict"):
        (spec,) = (
            s
            for s in PROCESSORS[processor].changelog_specs()
            if s.topic.value == f"{processor}-{processor}-graded-changelog"
        )
        cfg = topic_configs(spec, settings)
        assert cfg["cleanup.policy"] == "compact,delete"
        assert cfg["retention.ms"] == str(3600 * 1000)


def test_the_tables_use_rocksdb_with_the_retention_as_ttl(tmp_path: Path) -> None:
    import services.gate.app as gate
    import services.verdict.app as verdict

    settings = Settings(
        PASSK_DATA_DIR=str(tmp_path), PASSK_DEDUP_RETENTION_S=3 * 86400, PASSK_METRICS_PORT=0
    )  # type: ignore[call-arg]
    for module in (gate, verdict):
        app = module.build(settings, registry=CollectorRegistry())
        _, graded = PROCESSORS[module.PROCESSOR].tables
        table = app.tables[graded.name]
        # the store actually built, not only the one asked for (faust falls back quietly)
        assert type(table.data).__module__ == "faust.stores.rocksdb"
        assert table.data.partition_path(0).is_relative_to(tmp_path)
        assert table.options["ttl"] == 3 * 86400
        # bounded buffers: RAM does not grow with the retention
        assert table.options["write_buffer_size"] == ROCKSDB_OPTIONS["write_buffer_size"]
        assert table.options["block_cache_size"] <= 16 * 1024 * 1024


def test_a_join_is_built_again_in_one_process_on_another_registry(tmp_path: Path) -> None:
    """Its counters are per build: a second build on its own registry does not collide
    with the first (prometheus_client refuses a metric name twice on one registry)."""
    import services.gate.app as gate
    import services.verdict.app as verdict

    settings = Settings(PASSK_DATA_DIR=str(tmp_path), PASSK_METRICS_PORT=0)  # type: ignore[call-arg]
    for module, counter in ((gate, "passk_gate_results"), (verdict, "passk_trials")):
        registries = (CollectorRegistry(), CollectorRegistry())
        for registry in registries:
            module.build(settings, registry=registry)
        for registry in registries:
            assert counter in {family.name for family in registry.collect()}
