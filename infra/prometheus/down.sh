#!/usr/bin/env bash
# Stop the Prometheus and Alertmanager that infra/prometheus/up.sh started (by pid).
# Their data stays in PASSK_MONITORING_DIR until `make clean`.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${PASSK_MONITORING_DIR:-$root/var/monitoring}"
for name in prometheus alertmanager; do
  pidfile="$dir/$name.pid"
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "down: stopped $name ($pid)"
  fi
  rm -f "$pidfile"
done
