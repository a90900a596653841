#!/usr/bin/env bash
# Stop the test cluster that pg-up.sh started; leaves nothing running. Its data stays.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pg-env.sh"

if [[ -z "$PG_BIN" || ! -s "$PASSK_PG_DATA/PG_VERSION" ]]; then
  exit 0  # nothing was ever started here
fi
if as_postgres "$PG_BIN/pg_ctl" -D "$PASSK_PG_DATA" status >/dev/null 2>&1; then
  as_postgres "$PG_BIN/pg_ctl" -D "$PASSK_PG_DATA" -m fast -w -t 60 stop >/dev/null
  echo "PostgreSQL on port $PASSK_PG_PORT stopped"
fi
