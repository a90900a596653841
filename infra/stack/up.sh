#!/usr/bin/env bash
# Start Kafka (or reuse one that runs) and every worker of services.contract.processors.WORKERS (plus the
# judge stand-in when no model is configured) under supervisord, which restarts a worker
# that exits. Idempotent: a running supervisord is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
run="$root/var/run"; logs="$root/var/log"
mkdir -p "$run" "$logs"
bin="$root/.venv/bin"; passk="$bin/passk"
conf="$run/supervisord.conf"
# This stack's own settings only: not those an earlier `make up` wrote down for a fresh
# shell (var/run/passk.env, rewritten below).
export PASSK_ENV_FILE=""
# Every port, PASSK_PORT_OFFSET added to each default (services/contract/ports.py).
eval "$("$bin/python" -m services.contract.ports)"
base="$PASSK_METRICS_PORT_BASE"  # a worker serves /metrics on base + its metrics_offset (services/contract/processors.py)

# The mark says this `make up` started the broker, so `make down` stops it; a broker that
# already ran (`make kafka-up`, CI, another clone's) is reused and left running.
PASSK_KAFKA_STARTED_MARK="$run/kafka.started-by-up" bash infra/kafka/kafka-up.sh
secrets=""
if [ "${PASSK_KAFKA_SECURITY:-plaintext}" = sasl_ssl ]; then
  # This script's own commands (topics, status) run as the CLI user; each supervised
  # worker runs as its own user (passk-<worker>), set per program in the config.
  secrets="${PASSK_KAFKA_DIR:-$root/var/kafka}/secrets"
  eval "$("$bin/python" infra/kafka/secure.py env "$secrets" passk-cli)"
fi
"$passk" topics create >/dev/null

standin_port=0
if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  standin_port="$PASSK_STANDIN_PORT"
  export OPENAI_BASE_URL="http://127.0.0.1:$standin_port/v1" OPENAI_API_KEY="stand-in"
  echo "up: no model configured; judges use the offline stand-in (not a model) on :$standin_port"
  # The CLI (`passk calibrate`), run later in another shell, grades with the same one.
  "$bin/python" -m services.contract.runfiles judge --base-url "$OPENAI_BASE_URL" --stand-in
else
  "$bin/python" -m services.contract.runfiles judge --base-url "${OPENAI_BASE_URL:-https://api.openai.com/v1}"
fi

# The reference product (examples/agent/, the debrief assistant `make demo` runs scenarios
# against) on :8600, with the demo's fault plan unless PASSK_AGENT_FAULTS says otherwise
# ('{}': no fault). PASSK_AGENT_PORT=0: not started.
agent_port="$PASSK_AGENT_PORT"
# The review app (`passk review`, docs/review.md) on 127.0.0.1:8700; PASSK_REVIEW_PORT=0: not
# started. Reviewers sign in with PASSK_REVIEW_TOKENS="name:token,...".
review_port="$PASSK_REVIEW_PORT"
export PASSK_AGENT_FAULTS="${PASSK_AGENT_FAULTS:-@$root/examples/agent/faults.demo.json}"

# Every process gets the same configuration (supervisord passes its environment on);
# record it so an operator can see it: mode 0600, every password in a URL masked
# (services/contract/masking.py), Kafka passwords and API keys not recorded at all.
"$bin/python" -m services.contract.runfiles env "$run/env"
# What a command in a fresh shell reads to reach this stack (no secrets): `passk status`
# with no export talks to these ports and this topic prefix. `make down` removes it.
env -u PASSK_ENV_FILE "$bin/python" -m services.contract.runfiles settings "$run/passk.env"

# An earlier `make up`'s configuration is asked only while the socket it names is in a
# place no other user can reach (exit 2 and why, otherwise: its supervisord would be theirs).
[ -f "$conf" ] && "$passk" supervise socket --conf "$conf" >/dev/null
if [ -f "$conf" ] && "$bin/supervisorctl" -c "$conf" pid >/dev/null 2>&1; then
  echo "up: supervisord already running (pid $("$bin/supervisorctl" -c "$conf" pid))"
else
  "$passk" supervise config --out "$conf" --log-dir "$logs" --metrics-base "$base" \
      --standin-port "$standin_port" --agent-port "$agent_port" --review-port "$review_port" \
      ${secrets:+--kafka-secrets "$secrets"} >/dev/null
  rm -f "$run"/*.health.json  # restarts are counted from this `make up` on
  # The CLI user's name and password stay out of supervisord's environment: a worker
  # connects only as the user its program sets.
  env -u KAFKA_SASL_USERNAME -u KAFKA_SASL_PASSWORD "$bin/supervisord" -c "$conf"
  echo "up: supervisord started (config var/run/supervisord.conf, logs var/log/)"
fi
"$bin/supervisorctl" -c "$conf" status || true

# Hook point: executable scripts in infra/stack/up.d/ run here, in name order, with the
# same environment (e.g. Prometheus and Alertmanager). down.d/ mirrors it.
for hook in "$root"/infra/stack/up.d/*.sh; do
  [ -e "$hook" ] && bash "$hook"
done

"$passk" status --wait 120 --processors "$("$passk" supervise workers)"
if [ "$agent_port" != 0 ]; then
  "$bin/python" - "$agent_port" <<'PY'
import sys, time, urllib.request
url, deadline = f"http://127.0.0.1:{sys.argv[1]}/healthz", time.monotonic() + 60
while True:
    try:
        urllib.request.urlopen(url, timeout=1)
        print(f"up: reference product (examples/agent) on {url.removesuffix('/healthz')}")
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"up: the reference product did not answer at {url} (var/log/example-agent.log)")
        time.sleep(0.3)
PY
fi
