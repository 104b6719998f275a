#!/usr/bin/env bash
# The test suite, in two tiers.
#
#   scripts/test.sh          the whole suite (what CI runs)
#   scripts/test.sh --fast   the fast tier: the library's unit and property
#                            tests, the API tests against SQLite, the CLI's
#                            basics and the shipped policies (minutes; no
#                            moto, no private clusters, no browser)
#
# The whole suite: unit, property and end-to-end tests against real SQLite,
# real PostgreSQL and MariaDB, private PostgreSQL 15 and 17 clusters (started by
# the tests, scripts/postgres.sh), moto (AWS STS/IAM/S3 on loopback, started by
# the tests); the shipped policies must validate; schemathesis checks a live
# broker against the OpenAPI document it generates, once per credential kind
# (scripts/schemathesis.sh; MAX_TIME seconds each, default 40); the web
# console's browser tests drive Debian's Chromium against a real `tessera serve
# --dev` (scripts/console-test.sh; playwright-core from the lock file); the
# Python SDK's tests and the MCP interop example's (scripts/python.sh: a
# virtualenv from client-lib/python/requirements-test.lock) against real brokers.
#
# Why lanes (scripts/lanes.py): the test binaries and the external checks run
# side by side, each as soon as cargo has built what it needs, while the rest
# still compiles; each lane's output is kept whole and printed when it ends.
# The private clusters' tests are a binary of their own (broker/tests/clusters)
# so they run beside the API tests. Every lane runs, whatever another's
# outcome; the suite fails if any lane failed.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=full
case "${1:-}" in
  "") ;;
  --fast) tier=fast ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac

logs=$(mktemp -d "${TMPDIR:-/tmp}/tessera-test.XXXXXX")
started=$SECONDS

scripts/services.sh
# Fetched while cargo compiles (scripts/lanes.py); the lanes that use them wait.
tools=true
if [ "$tier" = full ]; then
  tools="scripts/moto.sh install && scripts/postgres.sh install && scripts/schemathesis.sh install && scripts/console-test.sh install && scripts/python.sh install"
fi

targets=(--workspace)
[ "$tier" = fast ] && targets=(-p tessera-broker --lib --bins --test api --test cli)
status=0
python3 scripts/lanes.py "$tier" "$logs" "$tools" -- "${targets[@]}" || status=$?
echo "== scripts/test.sh${1:+ $1}: $((SECONDS - started))s"
[ "$status" = 0 ] && rm -rf "$logs"
exit "$status"
