#!/usr/bin/env bash
# Stop every process `make up` started (by pid, whole process group), then the broker
# if kafka-up started it. Leaves nothing of ours running.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
run="$root/var/run"
for pidfile in "$run"/*.pid; do
  [ -e "$pidfile" ] || continue
  name="$(basename "$pidfile" .pid)"; pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
    echo "down: stopped $name ($pid)"
  fi
  rm -f "$pidfile"
done
bash "$root/infra/kafka/kafka-down.sh"
