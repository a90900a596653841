"""Kafka plumbing below the Faust runtime: client settings, topic admin, consumer lag, topic
followers (the scenario catalog, the calibrations book), and the per-processor Kafka users.
Named `services.kafka`, never a top-level `kafka`, so it does not shadow kafka-python."""
