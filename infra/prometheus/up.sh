#!/usr/bin/env bash
# Start Prometheus and Alertmanager for the workers `make up` runs, when Debian's
# `prometheus` and `prometheus-alertmanager` are installed (otherwise say so and go on).
# Config rendered into PASSK_MONITORING_DIR (default var/monitoring) from the worker list,
# the settings and infra/prometheus/alerts.yml; data there too. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="$root/.venv/bin/python"
dir="${PASSK_MONITORING_DIR:-$root/var/monitoring}"
prometheus="$(command -v prometheus || true)"
alertmanager="$(command -v prometheus-alertmanager || command -v alertmanager || true)"
if [ -z "$prometheus" ] || [ -z "$alertmanager" ]; then
  echo "up: Prometheus/Alertmanager not installed (apt-get install prometheus prometheus-alertmanager); skipping them"
  exit 0
fi
mkdir -p "$dir/prometheus-data" "$dir/alertmanager-data"
cd "$root"
eval "$(PASSK_MONITORING_DIR="$dir" "$python" -m services.monitoring.config render)"

alive() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
start() {  # name, command...
  local name=$1; shift
  if alive "$name"; then echo "up: $name already running (pid $(cat "$dir/$name.pid"))"; return; fi
  setsid nohup "$@" >>"$dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
  echo "up: $name started (pid $!, log ${dir#"$root"/}/$name.log)"
}
start alertmanager "$alertmanager" \
  --config.file="$dir/alertmanager.yml" --storage.path="$dir/alertmanager-data" \
  --web.listen-address="$ALERTMANAGER_LISTEN" --cluster.listen-address=
start prometheus "$prometheus" \
  --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prometheus-data" \
  --web.listen-address="$PROMETHEUS_LISTEN" --web.enable-lifecycle
"$python" -m services.monitoring.config wait "http://$ALERTMANAGER_LISTEN" "http://$PROMETHEUS_LISTEN"
echo "up: Prometheus http://$PROMETHEUS_LISTEN  Alertmanager http://$ALERTMANAGER_LISTEN"
