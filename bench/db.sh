#!/usr/bin/env bash
# Benchmark of the postgres backend (issue 4): credentials issued per second
# through the broker end to end (POST /v1/exchange, CLIENTS concurrent clients),
# the time to end one run holding HOLD live users until all are dropped, and raw
# SQL on the same server in the same run as the ceiling.
#
#   bench/db.sh                          # CLIENTS=16 ISSUE=2000 HOLD=1000, SCRAM 4096 and 1024
#   CLIENTS=8 ISSUE=2000 ITERATIONS=4096 bench/db.sh
#
# Needs PostgreSQL on 127.0.0.1:5432 (scripts/services.sh); PG_URL overrides it.
# Loopback only. The broker runs in process (examples/db_bench.rs), release build.
# Results: bench/out/db.md.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
# ISSUE stays under ~2,400: before PostgreSQL 16 every live user is an entry in
# the table's ACL, which then no longer fits in a row (docs/backends/databases.md).
export CLIENTS=${CLIENTS:-16} ISSUE=${ISSUE:-2000} HOLD=${HOLD:-1000}
# SCRAM iteration counts to compare: PostgreSQL runs the same PBKDF2 on every
# CREATE ROLE, so the count bounds the raw ceiling as much as the broker.
ITERATIONS=${ITERATIONS:-4096 1024}
cargo build --release --locked -q --example db_bench
TARGET=${CARGO_TARGET_DIR:-target}
{
  echo "# postgres backend — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, loopback"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo '```'
  for it in $ITERATIONS; do
    SCRAM_ITERATIONS=$it "$TARGET/release/examples/db_bench"
    echo
  done
  echo '```'
} | tee bench/out/db.md
