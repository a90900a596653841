#!/usr/bin/env bash
# Prometheus + Alertmanager when installed (infra/prometheus/up.sh says so otherwise).
bash "$(dirname "$0")/../../prometheus/up.sh"
