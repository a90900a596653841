"""Exit 0 once a Kafka broker answers a metadata request, 1 after the deadline."""

import logging
import sys
import time

from kafka import KafkaAdminClient

logging.disable(logging.CRITICAL)
bootstrap, deadline_s = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + deadline_s
while True:
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        admin.list_topics()
        admin.close()
        sys.exit(0)
    except Exception:
        if time.monotonic() >= deadline:
            sys.exit(1)
        time.sleep(0.5)
