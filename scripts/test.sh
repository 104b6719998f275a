#!/usr/bin/env bash
# The whole test suite: unit, property and end-to-end tests against real SQLite
# and real PostgreSQL, then the shipped policies must validate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
cargo test --workspace --locked
cargo run --locked -q --bin tessera -- policy check policy
cargo run --locked -q --bin tessera -- policy test policy
