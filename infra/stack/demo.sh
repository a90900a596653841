#!/usr/bin/env bash
# The main job, end to end, as an operator runs it: start the stack, publish the example
# scenarios, generate production-like traffic (three reliable scenarios and one flaky one,
# with late, early and duplicated events), replay it, wait for every verdict, print the
# report and the deploy gate's answer (which fails the build on the flaky scenario).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
passk="$root/.venv/bin/passk"
# A demo should not make you wait two minutes for a session that never comes.
export PASSK_SESSION_WAIT_S="${PASSK_SESSION_WAIT_S:-15}"
export PASSK_JUDGE_WAIT_S="${PASSK_JUDGE_WAIT_S:-120}"
run_id="${PASSK_DEMO_RUN_ID:-demo-$(date -u +%Y%m%dT%H%M%SZ)}"
out="$root/var/demo/$run_id"
mkdir -p "$out"

echo "== 1/7 stack: Kafka, processors, judge"
bash infra/stack/up.sh

echo "== 2/7 scenarios"
"$passk" scenarios publish examples/scenarios

# Judges earn the right to fail a deploy: each example judge runs over its labelled set.
# Five calibrate above the bar (gating); no_customer_charge_stated does not (advisory).
echo "== 3/7 judge calibration"
if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  # the same stand-in up.sh started for the judge worker, so the same judge versions
  export OPENAI_BASE_URL="http://127.0.0.1:${PASSK_STANDIN_PORT:-8400}/v1" OPENAI_API_KEY="stand-in"
fi
"$passk" calibrate examples/calibration

echo "== 4/7 production-like traffic for run $run_id"
# The stand-in fails the advisory judge on some trials: they must still pass.
"$passk" generate --scenarios examples/scenarios --run-id "$run_id" \
  --out "$out/traffic.jsonl" --expected "$out/expected.json" \
  --trials 5 --default-pass-prob 1.0 --pass-prob debrief-follow-up-required=0.6 \
  --advisory no_customer_charge_stated=0.4 --seed "${PASSK_DEMO_SEED:-7}"

echo "== 5/7 replay"
"$passk" replay "$out/traffic.jsonl"

echo "== 6/7 waiting for every verdict"
"$passk" wait --run-id "$run_id" --expected "$out/expected.json" --timeout 600

echo "== 7/7 report and deploy gate"
"$passk" report --run-id "$run_id" --html "$out/report.html"
set +e
"$passk" gate --run-id "$run_id"
gate_rc=$?
set -e
echo
if [ "$gate_rc" -eq 0 ]; then
  echo "deploy gate: PASS (exit 0)"
elif [ "$gate_rc" -eq 1 ]; then
  echo "deploy gate: FAIL (exit 1) - this build would not ship; the report says why"
else
  echo "deploy gate: could not decide (exit $gate_rc)"; exit "$gate_rc"
fi
echo "The report page (one self-contained file; open it in a browser): $out/report.html"
if command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null; then
  echo "Prometheus:   ${PASSK_PROMETHEUS_URL:-http://127.0.0.1:9090}  (try passk_scenario_pass_hat_k; alerts under /alerts)"
  echo "Alertmanager: ${PASSK_ALERTMANAGER_URL:-http://127.0.0.1:9095}"
fi
echo "The stack is still running: 'passk report --run-id $run_id --json', 'passk status'; 'make down' stops it."
