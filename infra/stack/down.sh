#!/usr/bin/env bash
# Stop what `make up` started: the hooks' services, supervisord and every worker under it
# (whole process groups), anything an older `make up` left by pid file, then the broker
# if `make up` started it (one it reused, e.g. `make kafka-up`'s, is left running). Leaves nothing of ours running.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
run="$root/var/run"; bin="$root/.venv/bin"
conf="$run/supervisord.conf"

for hook in "$root"/infra/stack/down.d/*.sh; do
  [ -e "$hook" ] && bash "$hook"
done

if [ -f "$run/supervisord.pid" ]; then
  pid="$(cat "$run/supervisord.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    # shutdown stops every program (TERM to its group, KILL after stopwaitsecs), then exits
    # shutdown only through a socket still ours (else another user's server would be
    # asked); TERM to the pid does the same, the workers' groups included
    if "$bin/passk" supervise socket --conf "$conf" >/dev/null; then
      "$bin/supervisorctl" -c "$conf" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null
    else
      kill -TERM "$pid" 2>/dev/null
    fi
    for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "down: stopped supervisord ($pid) and its workers"
  fi
  rm -f "$run/supervisord.pid"
fi

for pidfile in "$run"/*.pid; do  # from a `make up` before supervisord
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
rm -f "$run/judge.json"  # the stand-in it names is stopped: the CLI must not use it
rm -f "$run/passk.env"  # the stack it describes is gone: a fresh shell takes the defaults
if [ -f "$run/kafka.started-by-up" ]; then
  bash "$root/infra/kafka/kafka-down.sh"
  rm -f "$run/kafka.started-by-up"
else
  echo "down: the broker was not started by make up; left running (make kafka-down stops it)"
fi
