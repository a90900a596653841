#!/usr/bin/env bash
# Stop every node kafka-up.sh started here, by its pid; waits until each has exited.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${PASSK_KAFKA_DIR:-$root/var/kafka}"
shopt -s nullglob
pidfiles=()
for f in "$data/kafka.pid" "$data"/node*/kafka.pid; do [ -f "$f" ] && pidfiles+=("$f"); done
stopped=0
# All nodes are asked at once: a cluster stopped one by one loses its controller quorum
# half-way and the last nodes wait for it.
for pidfile in "${pidfiles[@]}"; do
  pid="$(cat "$pidfile")"
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid"
done
for pidfile in "${pidfiles[@]}"; do
  pid="$(cat "$pidfile")"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "kafka: killed $pid"; fi
  rm -f "$pidfile"
  stopped=$((stopped + 1))
done
if [ "$stopped" = 0 ]; then echo "kafka: not started by us"; else echo "kafka: stopped $stopped node(s)"; fi
