#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the store tests (idempotent): 127.0.0.1 only, trust auth
# on loopback, database passk_test. Uses Debian's packages (apt-get install -y postgresql).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pg-env.sh"

if [[ -z "$PG_BIN" ]]; then
  echo "pg-up: no PostgreSQL binaries under /usr/lib/postgresql/*/bin;" \
       "install them with: apt-get install -y postgresql" >&2
  exit 1
fi

mkdir -p "$(dirname "$PASSK_PG_DATA")"
chown postgres:postgres "$(dirname "$PASSK_PG_DATA")"
# One pg-up at a time: two concurrent initdb runs in one directory would both fail.
exec 9>"$(dirname "$PASSK_PG_DATA")/.pg-up.lock"
flock 9

if [[ ! -s "$PASSK_PG_DATA/PG_VERSION" ]]; then
  rm -rf "$PASSK_PG_DATA"
  install -d -o postgres -g postgres -m 700 "$PASSK_PG_DATA"
  as_postgres "$PG_BIN/initdb" -D "$PASSK_PG_DATA" -U postgres --auth-local=trust \
    --auth-host=trust --encoding=UTF8 --locale=C.UTF-8 >"$PASSK_PG_DATA.initdb.log" 2>&1 || {
    echo "pg-up: initdb failed; see $PASSK_PG_DATA.initdb.log" >&2; exit 1; }
  cat >"$PASSK_PG_DATA/pg_hba.conf" <<'HBA'
# passk test cluster: local socket and loopback only, no passwords.
local all all              trust
host  all all 127.0.0.1/32 trust
HBA
  cat >>"$PASSK_PG_DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PASSK_PG_PORT
unix_socket_directories = '$PASSK_PG_DATA'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
fi

if ! as_postgres "$PG_BIN/pg_ctl" -D "$PASSK_PG_DATA" status >/dev/null 2>&1; then
  as_postgres "$PG_BIN/pg_ctl" -D "$PASSK_PG_DATA" -l "$PASSK_PG_DATA/server.log" -w -t 60 \
    start >/dev/null 9>&- || { echo "pg-up: start failed; see $PASSK_PG_DATA/server.log" >&2; exit 1; }
fi

for _ in $(seq 1 120); do
  "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PASSK_PG_PORT" && break
  sleep 0.5
done
"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PASSK_PG_PORT" || {
  echo "pg-up: PostgreSQL is not answering on 127.0.0.1:$PASSK_PG_PORT" >&2; exit 1; }

exists="$("$PG_BIN/psql" -h 127.0.0.1 -p "$PASSK_PG_PORT" -U postgres -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = '$PASSK_PG_DB'")"
if [[ "$exists" != 1 ]]; then
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PASSK_PG_PORT" -U postgres "$PASSK_PG_DB"
fi
echo "PostgreSQL ready: $(bash "$(dirname "${BASH_SOURCE[0]}")/pg-url.sh") (data: $PASSK_PG_DATA)"
