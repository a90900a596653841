#!/usr/bin/env bash
# The loopback webhook receiver `make demo` started (infra/stack/demo-continuous.sh).
root="$(cd "$(dirname "$0")/../../.." && pwd)"
pidfile="$root/var/run/demo-webhook.pid"
[ -f "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  echo "down: stopped the demo's webhook receiver ($pid)"
fi
rm -f "$pidfile"
