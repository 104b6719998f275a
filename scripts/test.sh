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
# Why lanes: most of the suite waits (on brokers starting, on databases, on
# revocation deadlines) rather than computes, so everything is compiled once
# and then the test binaries and the external checks run side by side, each
# lane's output kept whole in its own log and printed when the lane ends. The
# slowest lane is the API tests; the private clusters' tests are a binary of
# their own (broker/tests/clusters) so they run beside it. Every lane runs,
# whatever another's outcome; the suite fails if any lane failed.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=full
case "${1:-}" in
  "") ;;
  --fast) tier=fast ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac

bin="${CARGO_TARGET_DIR:-target}/debug/tessera"
logs=$(mktemp -d "${TMPDIR:-/tmp}/tessera-test.XXXXXX")
started=$SECONDS

scripts/services.sh
if [ "$tier" = full ]; then
  scripts/moto.sh install
  scripts/postgres.sh install
  scripts/schemathesis.sh install
  scripts/console-test.sh install
  scripts/python.sh install
fi

echo "== building the tests"
# The test binaries are run directly, not through `cargo test`: cargo holds
# the build directory's lock while its tests run, so lanes of `cargo test`
# would take turns. cargo prints where it put each binary.
targets=(--workspace)
[ "$tier" = fast ] && targets=(-p tessera-broker --lib --bins --test api --test cli)
cargo test --locked "${targets[@]}" --no-run --message-format=json-render-diagnostics \
  >"$logs/build.json"
python3 - "$logs/build.json" >"$logs/binaries" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        t = m["target"]
        print(t["name"], t["kind"][0], os.path.dirname(m["manifest_path"]), m["executable"])
PY

declare -A lane_pid=() lane_started=()
lane() { # NAME COMMAND...: runs COMMAND in the background, its output in $logs/NAME.log
  local name=$1
  shift
  lane_started[$name]=$SECONDS
  ("$@") >"$logs/$name.log" 2>&1 &
  lane_pid[$name]=$!
}

tests() { # TARGET KIND [TEST ARGS...]: runs one test binary as cargo would (from its package)
  local target=$1 kind=$2 dir exe
  shift 2
  read -r dir exe < <(awk -v t="$target" -v k="$kind" '$1 == t && $2 == k { print $3, $4 }' "$logs/binaries")
  [ -n "${exe:-}" ] || { echo "no test binary $target ($kind)" >&2; return 1; }
  echo "== $target ($kind): $exe $*"
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" "$@")
}

# Each lane is a list of commands run in order; a failed command ends its lane.
lane_unit() {
  tests tessera_broker lib
  tests tessera bin
  tests tessera_client lib
  # Doc tests are compiled and run by rustdoc: the one lane that uses cargo.
  cargo test --locked --workspace --doc
}
lane_binaries() {
  tests cli test
  tests first_day test
  tests policy_cli test
}
lane_policies() {
  "$bin" policy check policy
  "$bin" policy test policy
}

if [ "$tier" = full ]; then
  lane api tests api test
  lane clusters tests clusters test
  lane unit lane_unit
  lane binaries lane_binaries
  lane policies lane_policies
  lane schemathesis scripts/schemathesis.sh run "$bin"
  lane console scripts/console-test.sh run "$bin"
  lane python scripts/python.sh run "$bin"
else
  lane unit tests tessera_broker lib
  lane bin tests tessera bin
  # The API tests against SQLite: every `both_stores!` test's SQLite half and
  # every test named for SQLite.
  lane api-sqlite tests api test sqlite
  # The CLI's basics: its errors, the admin commands, the first run.
  lane cli tests cli test errors:: admin:: first_run::
  lane policies lane_policies
fi

failed=()
while ((${#lane_pid[@]})); do
  # Whichever lane ends next is reported next, its log whole.
  set +e
  wait -n -p done_pid "${lane_pid[@]}"
  rc=$?
  set -e
  for name in "${!lane_pid[@]}"; do
    [ "${lane_pid[$name]}" = "$done_pid" ] || continue
    took=$((SECONDS - lane_started[$name]))
    echo "== lane $name: $([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)") in ${took}s"
    cat "$logs/$name.log"
    echo "== end of lane $name"
    [ "$rc" = 0 ] || failed+=("$name")
    unset "lane_pid[$name]"
  done
done

echo "== scripts/test.sh${1:+ $1}: $((SECONDS - started))s"
if ((${#failed[@]})); then
  echo "== failed lanes: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
rm -rf "$logs"
