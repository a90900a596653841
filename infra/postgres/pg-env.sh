# Sourced by pg-up.sh, pg-down.sh and pg-url.sh: where the test cluster lives and how to reach it.
PASSK_PG_PORT="${PASSK_PG_PORT:-54329}"
PASSK_PG_DB="${PASSK_PG_DB:-passk_test}"
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"

# The cluster must be owned by the `postgres` OS user (the server refuses to run as root),
# so it lives in the tree only if that user can reach it; otherwise under /tmp.
if [[ -z "${PASSK_PG_DATA:-}" ]]; then
  if id postgres >/dev/null 2>&1 && runuser -u postgres -- test -x "$_root" 2>/dev/null \
     && mkdir -p "$_root/var" && runuser -u postgres -- test -x "$_root/var" 2>/dev/null; then
    PASSK_PG_DATA="$_root/var/postgres/$PASSK_PG_PORT"
  else
    PASSK_PG_DATA="/tmp/passk-pg/$PASSK_PG_PORT"
  fi
fi

as_postgres() {
  if [[ "$(id -un)" == postgres ]]; then "$@"; else runuser -u postgres -- "$@"; fi
}
