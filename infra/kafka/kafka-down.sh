#!/usr/bin/env bash
# Stop the broker started by kafka-up.sh, by its pid; waits until it has exited.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${PASSK_KAFKA_DIR:-$root/var/kafka}"
pidfile="$data/kafka.pid"
[ -f "$pidfile" ] || { echo "kafka: not started by us"; exit 0; }
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "kafka: killed $pid"; fi
fi
rm -f "$pidfile"
echo "kafka: stopped"
