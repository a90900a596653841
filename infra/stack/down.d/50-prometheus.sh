#!/usr/bin/env bash
# Stop the Prometheus and Alertmanager that up.d/50-prometheus.sh started.
bash "$(dirname "$0")/../../prometheus/down.sh"
