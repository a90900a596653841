#!/usr/bin/env bash
# Print the URL of the test database (for PASSK_TEST_POSTGRES_URL).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pg-env.sh"
echo "postgresql://postgres@127.0.0.1:${PASSK_PG_PORT}/${PASSK_PG_DB}"
