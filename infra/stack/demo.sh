#!/usr/bin/env bash
# The main job, end to end, as an operator runs it: start the stack (with the reference
# product, examples/agent/, on :8600), publish the example scenarios, run them against the
# product with `passk run` (five trials each, a simulated user, the persisted session read
# through the product's API), wait for every verdict, print the report and the deploy
# gate's answer. The product's demo fault plan (examples/agent/faults.demo.json) loses the
# billing lines on two of the five follow-up trials, so the gate fails the build on that
# one unreliable scenario. (`passk generate` stays for synthetic load and benchmarks.)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
passk="$root/.venv/bin/passk"
export PASSK_ENV_FILE=""  # this demo's settings, not what an earlier `make up` wrote down
eval "$("$root/.venv/bin/python" -m services.contract.ports)"  # PASSK_PORT_OFFSET moves them all
# A demo should not make you wait two minutes for a session that never comes.
export PASSK_SESSION_WAIT_S="${PASSK_SESSION_WAIT_S:-15}"
export PASSK_JUDGE_WAIT_S="${PASSK_JUDGE_WAIT_S:-120}"
run_id="${PASSK_DEMO_RUN_ID:-demo-$(date -u +%Y%m%dT%H%M%SZ)}"
out="$root/var/demo/$run_id"
mkdir -p "$out"

# Said before anything is installed: what the demo would add to this machine, and how not to.
if ! command -v prometheus >/dev/null || ! { command -v prometheus-alertmanager >/dev/null \
    || command -v alertmanager >/dev/null; }; then
  if [ "${PASSK_DEMO_INSTALL:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "demo: its second half installs Debian's prometheus and prometheus-alertmanager with"
    echo "      apt-get (you are root); PASSK_DEMO_INSTALL=0 make demo skips that (no alert shown)"
  fi
fi

echo "== 1/6 stack: Kafka, processors, judge, reference product"
bash infra/stack/up.sh

echo "== 2/6 scenarios"
"$passk" scenarios publish examples/scenarios

# Judges earn the right to fail a deploy: each example judge runs over its labelled set.
# Five calibrate above the bar (gating); no_customer_charge_stated does not (advisory).
echo "== 3/6 judge calibration"
if [ -z "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  # the same stand-in up.sh started for the judge worker, so the same judge versions
  export OPENAI_BASE_URL="http://127.0.0.1:$PASSK_STANDIN_PORT/v1" OPENAI_API_KEY="stand-in"
fi
"$passk" calibrate examples/calibration

echo "== 4/6 passk run: every scenario five times against the reference product"
# Exit 130 (stopped) or 1 (a trial not published) ends the demo; re-running with the same
# run id would run only the trials missing from the log.
"$passk" run --scenarios examples/scenarios --target examples/agent/target-http.yaml \
  --run-id "$run_id" --trials 5 --concurrency 4 --agent-version "demo-agent"

echo "== 5/6 waiting for every verdict"
# What each trial must get, from the product's own fault switches (not from passk).
"$root/.venv/bin/python" -m examples.agent.expected --scenarios examples/scenarios \
  --run-id "$run_id" --trials 5 \
  --faults "${PASSK_AGENT_FAULTS:-@$root/examples/agent/faults.demo.json}" > "$out/expected.json"
"$passk" wait --run-id "$run_id" --expected "$out/expected.json" --timeout 600

echo "== 6/6 report and deploy gate"
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

# The continuous half: hours of event time, the windows, Prometheus, the drop alert and its
# notification (infra/stack/demo-continuous.sh; PASSK_DEMO_CONTINUOUS=0 skips it).
if [ "${PASSK_DEMO_CONTINUOUS:-1}" != 0 ]; then
  bash infra/stack/demo-continuous.sh
fi
