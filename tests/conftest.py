from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from services.contract.settings import Settings
from services.kafka.admin import create_topics
from tests.support import delete_topics_with_prefix, new_prefix

logging.getLogger("kafka").setLevel(logging.WARNING)
# What a `make up` in this checkout wrote down for a fresh shell (var/run/passk.env) is
# not this suite's configuration: every test and every command it starts reads only the
# environment it is given (the tests of that file set PASSK_ENV_FILE themselves).
os.environ["PASSK_ENV_FILE"] = ""


def _bootstrap() -> str:
    return Settings().kafka_bootstrap_servers  # type: ignore[call-arg]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The real broker. `make test` starts it; a test that needs it fails loudly without it."""
    bootstrap = _bootstrap()
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        admin.list_topics()
        admin.close()
    except Exception as exc:  # pragma: no cover - environment problem, reported plainly
        pytest.fail(f"no Kafka broker answers on {bootstrap} ({exc}); run `make kafka-up`")
    return bootstrap


def make_settings(kafka_bootstrap: str, directory: Path, **overrides: Any) -> Settings:
    """Settings with their own topic prefix (so tests never see each other's records), their
    own SQLite file and data dir under `directory`; topics are created up front. `overrides`
    (settings by their environment names) replace the defaults below."""
    values: dict[str, Any] = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "PASSK_TOPIC_PREFIX": new_prefix(),
        "PASSK_DATABASE_URL": f"sqlite:///{directory / 'passk.db'}",
        "PASSK_DATA_DIR": str(directory / "data"),
        "PASSK_SESSION_WAIT_S": 5,
        "PASSK_JUDGE_WAIT_S": 60,
        # Tests about other things than calibration let every judge fail trials, as
        # before calibration existed; the calibration tests set "advisory" (the default).
        "PASSK_UNCALIBRATED_JUDGES": "gating",
    }
    s = Settings(**values | overrides)
    create_topics(s)
    return s


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings for one test (see make_settings); the test's topics are deleted after it."""
    s = make_settings(kafka_bootstrap, tmp_path)
    yield s
    delete_topics_with_prefix(s)
