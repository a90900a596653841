#!/usr/bin/env bash
# The shell steps of the GitHub Action (action.yml at the repository root), one
# subcommand each, so that they are tested here (tests/integration/infra/test_ci_action.py)
# rather than only on GitHub:
#
#   action.sh install   venv with passk and its pinned dependencies; the Kafka jars fetched
#                       into ~/.cache/passk unless cached; outputs kafka-version, passk
#   action.sh run       passk ci with the action's inputs (INPUT_* variables); its exit code
#                       goes to the step's outputs (exit-code) and the step itself succeeds,
#                       so the comment and the artifacts follow whatever the gate said
#   action.sh comment   posts the Markdown as one sticky pull-request comment, or updates
#                       the one posted before (found by its marker), with the `gh` CLI
#
# GitHub gives each step GITHUB_OUTPUT (a file of name=value lines), GITHUB_ACTION_PATH
# (this repository's checkout), RUNNER_TEMP, GITHUB_REPOSITORY, GITHUB_EVENT_PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${GITHUB_OUTPUT:-/dev/null}"
marker="<!-- passk-ci -->"  # services/ci/render.py MARKER

output() { printf '%s=%s\n' "$1" "$2" >> "$out"; }

install() {
  local venv="${PASSK_VENV:-$root/.venv}" python="${PYTHON:-python3}"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -c "$root/requirements.lock" -e "$root"
  local version
  version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$root/infra/kafka/pom.xml")"
  # The jars once per version (actions/cache keeps ~/.cache/passk between runs).
  PYTHON="$venv/bin/python" bash "$root/infra/kafka/kafka-up.sh" --fetch-only
  output kafka-version "$version"
  output passk "$venv/bin/passk"
}

run() {
  local passk="${PASSK_BIN:-${PASSK_VENV:-$root/.venv}/bin/passk}"
  local dir="${INPUT_OUTPUT_DIR:-${RUNNER_TEMP:-/tmp}/passk-ci}"
  mkdir -p "$dir"
  : "${INPUT_SCENARIOS:?the action needs the input scenarios}"
  : "${INPUT_TARGET:?the action needs the input target}"
  local run_id="${INPUT_RUN_ID:-}"
  [ -n "$run_id" ] || run_id="ci-$(date -u +%Y%m%dT%H%M%SZ)"
  local args=(ci --scenarios "$INPUT_SCENARIOS" --target "$INPUT_TARGET" --run-id "$run_id"
              --junit "$dir/junit.xml" --markdown "$dir/comment.md" --html "$dir/report.html")
  [ -z "${INPUT_TRIALS:-}" ] || args+=(--trials "$INPUT_TRIALS")
  [ -z "${INPUT_BASELINE:-}" ] || args+=(--baseline "$INPUT_BASELINE")
  [ "${INPUT_FAIL_ON_REGRESSION:-false}" != true ] || args+=(--fail-on-regression)
  [ -z "${INPUT_BUDGET:-}" ] || args+=(--adaptive --budget "$INPUT_BUDGET")
  [ -z "${INPUT_GOAL:-}" ] || args+=(--goal "$INPUT_GOAL")
  if [ -n "${INPUT_ARGS:-}" ]; then
    local extra
    read -r -a extra <<< "$INPUT_ARGS"  # words, never evaluated
    args+=("${extra[@]}")
  fi
  local code=0
  "$passk" "${args[@]}" || code=$?
  output exit-code "$code"
  output run-id "$run_id"
  output junit "$dir/junit.xml"
  output markdown "$dir/comment.md"
  output html "$dir/report.html"
  output dir "$dir"
  if [ ! -s "$dir/comment.md" ]; then  # no gate answer (exit 2, 4, 130): say so anyway
    printf '%s\n## passk ci `%s`: no answer (exit %s)\n\nThe run did not reach the deploy gate; see the job log.\n' \
      "$marker" "$run_id" "$code" > "$dir/comment.md"
  fi
  echo "passk ci exited $code"
}

pr_number() {
  # The pull request this run is for: from the event, unless PASSK_PR says.
  if [ -n "${PASSK_PR:-}" ]; then echo "$PASSK_PR"; return; fi
  [ -n "${GITHUB_EVENT_PATH:-}" ] && [ -f "$GITHUB_EVENT_PATH" ] || return 0
  "${PYTHON:-python3}" -c 'import json,sys; e=json.load(open(sys.argv[1])); n=(e.get("pull_request") or {}).get("number") or ""; print(n)' "$GITHUB_EVENT_PATH"
}

comment() {
  local body="${1:?the Markdown file}" number repo="${GITHUB_REPOSITORY:?}"
  number="$(pr_number)"
  if [ -z "$number" ]; then echo "not a pull request: no comment"; return 0; fi
  # The comment this action posted before carries the marker on its first line.
  local existing
  existing="$(gh api --paginate "repos/$repo/issues/$number/comments" \
    --jq ".[] | select(.body | startswith(\"$marker\")) | .id" | head -n 1)"
  if [ -n "$existing" ]; then
    gh api --method PATCH "repos/$repo/issues/comments/$existing" -F "body=@$body" >/dev/null
    echo "updated comment $existing on #$number"
  else
    gh api --method POST "repos/$repo/issues/$number/comments" -F "body=@$body" >/dev/null
    echo "commented on #$number"
  fi
}

case "${1:-}" in
  install) install ;;
  run) run ;;
  comment) shift; comment "$@" ;;
  *) echo "usage: action.sh install|run|comment FILE" >&2; exit 2 ;;
esac
