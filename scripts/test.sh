#!/usr/bin/env bash
# The whole test suite: unit, property and end-to-end tests against real SQLite,
# real PostgreSQL and MariaDB, private PostgreSQL 15 and 17 clusters (started by
# the tests, scripts/postgres.sh), moto (AWS STS/IAM/S3 on loopback, started by the tests),
# then the shipped policies must validate, then schemathesis checks a live broker
# against the OpenAPI document it generates, once per credential kind
# (scripts/schemathesis.sh; MAX_TIME seconds each, default 40), then the web
# console's browser tests drive Debian's Chromium against a real `tessera serve
# --dev` (scripts/console-test.sh; playwright-core from the lock file), then the
# Python SDK's tests and the MCP interop example's (scripts/python.sh: a virtualenv
# from client-lib/python/requirements-test.lock) against real brokers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
scripts/moto.sh install
scripts/postgres.sh install
scripts/schemathesis.sh install
scripts/console-test.sh install
scripts/python.sh install
cargo test --workspace --locked
cargo run --locked -q --bin tessera -- policy check policy
cargo run --locked -q --bin tessera -- policy test policy
scripts/schemathesis.sh run
scripts/console-test.sh run "${CARGO_TARGET_DIR:-target}/debug/tessera"
scripts/python.sh run "${CARGO_TARGET_DIR:-target}/debug/tessera"
