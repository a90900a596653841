#!/usr/bin/env bash
# Start Kafka (or reuse one that runs), the judge stand-in when no model is configured,
# and every processor in the background, each with the same environment. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
run="$root/var/run"; logs="$root/var/log"
mkdir -p "$run" "$logs"
passk="$root/.venv/bin/passk"
processors=(gate verdict judge sink aggregate calibration)
base="${PASSK_METRICS_PORT_BASE:-9464}"  # one /metrics port per processor, from here up
declare -A metrics_port=([gate]=$base [verdict]=$((base + 1)) [judge]=$((base + 2)) [sink]=$((base + 3)) [aggregate]=$((base + 4))
                         [calibration]=$((base + 5)))

bash infra/kafka/kafka-up.sh
"$passk" topics create >/dev/null

alive() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }
start() {  # name, command...
  local name=$1; shift
  if alive "$name"; then echo "up: $name already running (pid $(cat "$run/$name.pid"))"; return; fi
  setsid nohup "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
  echo "up: $name started (pid $!, log var/log/$name.log)"
}

if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  standin_port="${PASSK_STANDIN_PORT:-8400}"
  start judge-standin "$passk" judge-standin --host 127.0.0.1 --port "$standin_port"
  export OPENAI_BASE_URL="http://127.0.0.1:$standin_port/v1" OPENAI_API_KEY="stand-in"
  echo "up: no model configured; judges use the offline stand-in (not a model) on :$standin_port"
fi

# Every process gets the same configuration; record it so an operator can see it.
# (a database password is masked; Kafka passwords and API keys are not recorded at all)
env | grep -E '^(KAFKA_BOOTSTRAP_SERVERS|PASSK_|OPENAI_BASE_URL)=' | sort \
  | sed -E 's#^(PASSK_DATABASE_URL=[^:]+://[^:/@]+):[^@]*@#\1:***@#' > "$run/env" || true
secrets="${PASSK_KAFKA_DIR:-$root/var/kafka}/secrets"
for p in "${processors[@]}"; do
  if [ "${PASSK_KAFKA_SECURITY:-plaintext}" = sasl_ssl ]; then
    # each processor connects as its own SCRAM user, held to its ACLs
    ( eval "$(.venv/bin/python infra/kafka/secure.py env "$secrets" "passk-$p")"
      PASSK_METRICS_PORT="${metrics_port[$p]}" start "$p" "$passk" worker "$p" )
  else
    PASSK_METRICS_PORT="${metrics_port[$p]}" start "$p" "$passk" worker "$p"
  fi
done
if [ "${PASSK_KAFKA_SECURITY:-plaintext}" = sasl_ssl ]; then
  eval "$(.venv/bin/python infra/kafka/secure.py env "$secrets" passk-cli)"
fi
"$passk" status --wait 120 --processors "$(IFS=,; echo "${processors[*]}")"
