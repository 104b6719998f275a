#!/usr/bin/env bash
# The whole test suite: unit, property and end-to-end tests against real SQLite,
# real PostgreSQL and MariaDB, private PostgreSQL 15 and 17 clusters (started by
# the tests, scripts/postgres.sh), moto (AWS STS/IAM/S3 on loopback, started by the tests),
# then the shipped policies must validate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
scripts/moto.sh install
scripts/postgres.sh install
cargo test --workspace --locked
cargo run --locked -q --bin tessera -- policy check policy
cargo run --locked -q --bin tessera -- policy test policy
