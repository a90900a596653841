"""Publishing scenarios to the compacted scenarios topic: all of them, or none.

Every file is validated before anything is sent; a single problem anywhere means
nothing is published. The set is then written in one Kafka transaction, so a failure
half-way (a record the broker refuses, an outage) leaves nothing readable either.
A scenario whose content is already the latest on the topic is not sent again (its
version, a content hash, would be the same).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.producer.future import RecordMetadata

from schemas.scenario import Scenario
from services.contract.scenario_records import CatalogState, encode_scenario
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.scenario_loader import InvalidScenarios, LoadResult, validate_paths
from services.kafka.catalog import load_catalog
from services.kafka.kafka_client import kafka_client_kwargs

Status = Literal["new", "updated", "unchanged"]


@dataclass(frozen=True)
class Published:
    scenario: Scenario
    status: Status
    previous_version: str | None = None


def plan(scenarios: Sequence[Scenario], current: dict[str, Scenario]) -> list[Published]:
    """What publishing would do, given the latest version of each id on the topic."""
    out: list[Published] = []
    for scenario in scenarios:
        before = current.get(scenario.id)
        if before is None:
            out.append(Published(scenario, "new"))
        elif before.version == scenario.version:
            out.append(Published(scenario, "unchanged", before.version))
        else:
            out.append(Published(scenario, "updated", before.version))
    return out


def publish_scenarios(
    scenarios: Sequence[Scenario], settings: Settings, *, timeout: float = 30.0
) -> list[Published]:
    """Send every new or changed scenario (acks=all) and wait until the broker has them."""
    steps = plan(scenarios, load_catalog(settings))
    changed = [p for p in steps if p.status != "unchanged"]
    if not changed:
        return steps
    producer = KafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        # Idempotent: a retried send neither duplicates nor reorders versions of an id.
        enable_idempotence=True,
        # One transaction for the whole set: it is read (read_committed) all or not at all,
        # even if the broker refuses one record or fails half-way. One id per topic prefix:
        # two publishers at once fence each other instead of interleaving.
        transactional_id=f"{settings.topic_prefix}scenarios-publish",
        max_block_ms=int(timeout * 1000),
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        try:
            name = topic_name(Topic.SCENARIOS, settings)
            futures = []
            for step in changed:
                key, value = encode_scenario(step.scenario)
                futures.append(producer.send(name, key=key, value=value))
            producer.flush(timeout=timeout)
            # `get` raises the broker's error, if any.
            written = [future.get(timeout=timeout) for future in futures]
            producer.commit_transaction()
        except BaseException:
            _abort(producer)
            raise
    finally:
        producer.close(timeout=10)
    _await_readable(settings, written, timeout)
    return steps


def _await_readable(settings: Settings, written: list[RecordMetadata], timeout: float) -> None:
    """Return once a read_committed reader sees the whole set. The coordinator answers
    the commit before its markers reach the partitions, so until then the set sits above
    the last stable offset: a catalog starting right after `publish` would not see it."""
    last: dict[TopicPartition, int] = {}
    for meta in written:
        tp = TopicPartition(meta.topic, meta.partition)
        last[tp] = max(last.get(tp, -1), meta.offset)
    consumer = KafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            stable = consumer.end_offsets(list(last))
            if all(stable[tp] > offset for tp, offset in last.items()):
                return
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(
                    f"the published scenarios were not readable within {timeout:g} s"
                )
            time.sleep(0.05)
    finally:
        consumer.close()


def _abort(producer: KafkaProducer) -> None:
    try:
        producer.abort_transaction()
    except Exception:  # the original error is the one to report; the
        # broker aborts an open transaction itself when its timeout passes.
        pass


def publish_paths(
    paths: Iterable[Path | str], settings: Settings
) -> tuple[LoadResult, list[Published]]:
    """Validate every file, then publish; raises InvalidScenarios (publishing nothing)."""
    result = validate_paths(paths)
    if result.errors:
        raise InvalidScenarios(result.errors)
    return result, publish_scenarios(result.scenarios, settings)


def publish_set(
    scenarios: Sequence[Scenario], settings: Settings, wait: float | None
) -> list[Published]:
    """`passk scenarios publish` of a valid set: the broker reached, then the set published
    in one transaction. Unreachable when the catalog or the broker is; a CliError (4 for
    an unreachable broker, else 1) when the transaction failed: nothing was published."""
    from kafka.errors import KafkaError

    from services.contract.exits import CliError, ExitCode, Unreachable, classify
    from services.kafka.catalog import CatalogUnavailable
    from services.kafka.reach import require_broker

    require_broker(wait, settings)
    try:
        return publish_scenarios(scenarios, settings)
    except CatalogUnavailable as exc:
        raise Unreachable(str(exc)) from exc
    except KafkaError as exc:  # the set was one transaction: none of it is readable
        code = ExitCode.UNREACHABLE if classify(exc) else ExitCode.NO
        raise CliError(
            f"publishing failed, nothing was published: {type(exc).__name__}: {exc}", code
        ) from exc


def published_catalog(settings: Settings, wait: float | None) -> CatalogState:
    """`passk scenarios list`: the scenarios topic read whole (every version seen)."""
    from services.contract.exits import Unreachable
    from services.kafka.catalog import CatalogUnavailable, read_catalog
    from services.kafka.reach import require_broker

    require_broker(wait, settings)
    try:
        return read_catalog(settings)
    except CatalogUnavailable as exc:
        raise Unreachable(str(exc)) from exc
