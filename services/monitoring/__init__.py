"""Monitoring as configuration: the Prometheus and Alertmanager files `make up` runs with,
rendered from the worker list, the settings and infra/prometheus/alerts.yml, and the
Grafana dashboard generated as code (`dashboard.py`)."""
