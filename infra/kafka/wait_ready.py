"""Exit 0 once Kafka answers a metadata request (and lists at least MIN_BROKERS brokers),
1 after the deadline. Connects as the environment's client settings say (SASL_SSL too)."""

import logging
import sys
import time

from kafka import KafkaAdminClient

from services.contract.settings import Settings
from services.kafka.kafka_client import kafka_client_kwargs

logging.disable(logging.CRITICAL)
bootstrap, deadline_s = sys.argv[1], float(sys.argv[2])
min_brokers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
deadline = time.monotonic() + deadline_s
while True:
    try:
        kwargs = kafka_client_kwargs(Settings(KAFKA_BOOTSTRAP_SERVERS=bootstrap))  # type: ignore[call-arg]
        # kafka-python waits 30 s for a first broker by default: `ready 1` (is one already
        # up?) took 30 s on every fresh start. Keep each try within the deadline.
        left_ms = int((deadline - time.monotonic()) * 1000)
        admin = KafkaAdminClient(**kwargs, request_timeout_ms=3000,
                                 bootstrap_timeout_ms=max(500, min(left_ms, 10_000)))
        try:
            admin.list_topics()
            brokers = len(admin.describe_cluster().get("brokers") or [])
        finally:
            admin.close()
        if brokers >= min_brokers:
            sys.exit(0)
    except Exception:
        pass
    if time.monotonic() >= deadline:
        sys.exit(1)
    time.sleep(0.5)
