#!/usr/bin/env bash
# The continuous half of `make demo` (run after the CI part, on the stack it started): the
# production path. A support agent on the official openai client, instrumented by
# opentelemetry-instrumentation-openai-v2, sends plain GenAI traces (no passk id) to the
# OTLP receiver (`passk worker otlp`, started by `make up`) for several hours of event time
# (infra/stack/demo_traces.py); the receiver routes each by the `match:` rules of
# examples/production/, where `support-refunds` judges half its traffic with the LLM judge
# (`sampling: {llm_judges: 0.5}`) and degrades in its last (the current) hour. Then: the
# latest windows (`passk windows --runs 'production-*'`: all trials and the sampled ones),
# Prometheus's sampled pass^k for that scenario, the reliability-drop alert firing on the
# sampled figures, and the notification Alertmanager delivered to a loopback webhook
# receiver this script runs. Expected figures come from the traffic's plan (which trace
# is in the sample is the contract's hash of its id). `make down` stops all of it.
#
# Demo-sized monitoring: Prometheus scrapes every 5 s and every alert's `for:` is 10 s
# (PASSK_ALERT_FOR, rendered into var/monitoring; infra/prometheus/alerts.yml keeps the
# operator's 5m), Alertmanager groups for 1 s.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
bin="$root/.venv/bin"; passk="$bin/passk"; python="$bin/python"
eval "$("$python" -m services.contract.ports)"  # run alone too: PASSK_PORT_OFFSET moves them all
hours="${PASSK_DEMO_HOURS:-4}"
per_hour="${PASSK_DEMO_WINDOW_TRIALS:-24}"  # support-refunds traces per hour
degrading="${PASSK_DEMO_DEGRADING:-support-refunds}"
degraded_prob="${PASSK_DEMO_DEGRADED_PASS_PROB:-0.2}"
run_id="${PASSK_DEMO_LIVE_RUN_ID:-live-$(date -u +%Y%m%dT%H%M%SZ)}"
out="$root/var/demo/$run_id"
mkdir -p "$out" "$root/var/run"

echo
echo "== continuous 1/5 Prometheus, Alertmanager and a loopback webhook receiver"
monitoring=1
if ! command -v prometheus >/dev/null || ! { command -v prometheus-alertmanager >/dev/null \
    || command -v alertmanager >/dev/null; }; then
  if [ "${PASSK_DEMO_INSTALL:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "demo: installing Debian's prometheus and prometheus-alertmanager (as .ci/run does)"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      prometheus prometheus-alertmanager >/dev/null || monitoring=0
  else
    monitoring=0
  fi
  if [ "$monitoring" = 0 ]; then
    echo "demo: Prometheus/Alertmanager are not installed, so no alert is shown. To see it:"
    echo "        sudo apt-get install prometheus prometheus-alertmanager"
  fi
fi
webhook_port="${PASSK_DEMO_WEBHOOK_PORT:-9097}"
webhook_file="$out/notifications.jsonl"
pidfile="$root/var/run/demo-webhook.pid"
if [ "$monitoring" = 1 ]; then
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill -TERM -- "-$(cat "$pidfile")" 2>/dev/null || true  # an earlier demo's receiver
  fi
  : > "$webhook_file"
  setsid nohup "$python" -m services.monitoring.webhook --port "$webhook_port" \
    --out "$webhook_file" >>"$root/var/log/demo-webhook.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  echo "demo: webhook receiver on http://127.0.0.1:$webhook_port/alerts (pid $!)"
  export PASSK_ALERT_WEBHOOK_URL="http://127.0.0.1:$webhook_port/alerts"
  export PASSK_SCRAPE_INTERVAL="${PASSK_DEMO_SCRAPE_INTERVAL:-5s}"
  export PASSK_ALERT_FOR="${PASSK_DEMO_ALERT_FOR:-10s}"
  export PASSK_ALERT_GROUP_WAIT=1s PASSK_ALERT_GROUP_INTERVAL=5s
  # Started afresh with the demo's settings and empty data (the demo's own Prometheus):
  # alerts restored from an earlier run's data reached no webhook.
  bash infra/prometheus/down.sh >/dev/null
  rm -rf "${PASSK_MONITORING_DIR:-$root/var/monitoring}/prometheus-data" \
         "${PASSK_MONITORING_DIR:-$root/var/monitoring}/alertmanager-data"
  bash infra/prometheus/up.sh
  prom="${PASSK_PROMETHEUS_URL:-http://127.0.0.1:9090}"
fi

echo
echo "== continuous 2/5 $hours hours of production traffic: plain GenAI traces through the OTLP receiver"
"$passk" scenarios publish examples/production
hour_epoch=$(( $(date -u +%s) / 3600 * 3600 ))
hour_now="$(date -u -d "@$hour_epoch" +%Y-%m-%dT%H:%M:%SZ)"
read -r base_n base_passed base_ns base_ps < <("$python" infra/stack/demo_continuous.py baseline "$degrading" "$hour_now")
"$python" infra/stack/demo_traces.py send \
  --url "http://127.0.0.1:${PASSK_OTLP_PORT:-4318}/v1/traces" --plan "$out/plan.json" \
  --hours "$hours" --hour-start "$hour_epoch" --refunds "$per_hour" --degrading "$degrading" \
  --degraded-pass "$degraded_prob" --seed "${PASSK_DEMO_SEED:-7}" --nonce "$run_id"

echo
echo "== continuous 3/5 the latest windows per scenario (passk windows --runs 'production-*')"
show=("$python" infra/stack/demo_continuous.py show --scenario "$degrading" --hour "$hour_now"
      --plan "$out/plan.json" --base-n "$base_n" --base-passed "$base_passed"
      --base-sampled "$base_ns" --base-passed-sampled "$base_ps")
"${show[@]}" >"$out/plan.txt" || { cat "$out/plan.txt"; exit 1; }
cat "$out/plan.txt"
"$passk" windows --runs 'production-*' --window 1h --last "$hours" --html "$out/windows.html"

if [ "$monitoring" = 1 ]; then
  echo
  echo "== continuous 4/5 Prometheus and the drop alert; 5/5 the webhook's notification"
  "${show[@]}" --prometheus "$prom" --webhook-file "$webhook_file" | sed -n '/^== Prometheus/,$p'
fi
echo
echo "Reliability over time (one page): $out/windows.html"
