#!/usr/bin/env bash
# Load benchmark for POST /v1/capabilities: durable (committed before the token is
# returned), policy evaluated, signed, audited — on SQLite and on PostgreSQL — and,
# in the same run, a bare axum endpoint that only signs an Ed25519 JWT (the ceiling).
#
#   bench/issue.sh                 # defaults: 64 connections, 2 wrk threads, 15 s each
#   DURATION=30s CONNS=64 bench/issue.sh
#   TARGETS="sqlite" bench/issue.sh   # any of: ceiling sqlite postgres
#   BIN=/tmp/other/tessera TARGETS=sqlite bench/issue.sh   # measure another build
#
# Needs wrk, curl and jq (apt-get install wrk curl jq) and PostgreSQL on
# 127.0.0.1:5432 (scripts/services.sh). Loopback only. Results: bench/out/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-15s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
RUNS=${RUNS:-64}
PORT=${PORT:-8701}
TARGETS=${TARGETS:-ceiling sqlite postgres}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=bench/out
mkdir -p "$OUT"

for tool in wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install $tool)" >&2; exit 1; }
done

# BIN=/path/to/tessera compares another build of the broker (nothing is rebuilt).
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera --example sign_ceiling
  BIN="$TARGET/release/tessera"
fi
CEILING="$TARGET/release/examples/sign_ceiling"

RESULTS="$OUT/results.md"
{
  echo "# POST /v1/capabilities — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "wrk -t$THREADS -c$CONNS -d$DURATION, $RUNS runs, $(nproc) cores, loopback; load generator on the same machine."
  echo
  echo "| target | req/s | p50 | p99 | non-2xx | ops per commit | server CPU µs/req |"
  echo "|---|---|---|---|---|---|---|"
} > "$RESULTS"

pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_ready() {
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench: server on port $PORT did not come up" >&2
  return 1
}

# cpu_ticks PID -> user+system clock ticks of a process
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# cpu_per_req TICKS LOG -> server CPU microseconds per request
cpu_per_req() {
  local reqs; reqs=$(awk '/requests in/ {print $1}' "$2")
  awk -v t="$1" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (r > 0) printf "%.0f", t * 1e6 / hz / r; else print "-" }'
}

# run_wrk NAME SCRIPT PID -> appends a row
run_wrk() {
  local name=$1 script=$2 pid=$3
  local log="$OUT/$name.txt"
  local t0; t0=$(cpu_ticks "$pid")
  wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$script" "http://127.0.0.1:$PORT/v1/capabilities" > "$log" 2> "$OUT/$name.err" || true
  record "$name" "$log" - "$(cpu_per_req $(( $(cpu_ticks "$pid") - t0 )) "$log")"
}

# record NAME WRK_LOG OPS_PER_COMMIT CPU_US -> appends a row and prints a line
record() {
  local name=$1 log=$2 ops=$3 cpu=$4 rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' "$log")
  p50=$(awk '$1=="50%" {print $2}' "$log")
  p99=$(awk '$1=="99%" {print $2}' "$log")
  non2xx=$(awk '/Non-2xx/ {print $5}' "$log"); non2xx=${non2xx:-0}
  echo "| $name | $rps | $p50 | $p99 | $non2xx | $ops | $cpu |" >> "$RESULTS"
  echo "bench: $name: $rps req/s, p50 $p50, p99 $p99, non-2xx $non2xx, ops/commit $ops, server CPU $cpu us/req"
}

# bench_broker NAME STORE_URL
bench_broker() {
  local name=$1 store=$2
  local dir; dir=$(mktemp -d)
  TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" TESSERA_STORE_URL="$store" \
    "$BIN" serve --dev --config bench/tessera.toml --data-dir "$dir" --policy-dir bench/policy \
    --listen "127.0.0.1:$PORT" 2> "$OUT/$name.server.log" &
  local pid=$!
  pids+=("$pid")
  wait_ready /readyz
  local key
  key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
    "$BIN" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
  : > "$dir/tokens"
  for i in $(seq 1 "$RUNS"); do
    curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
      -d "{\"user\":\"alice\",\"task\":{\"id\":\"bench-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
      "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token >> "$dir/tokens"
  done
  local before c0
  before=$(curl -s "http://127.0.0.1:$PORT/metrics")
  c0=$(echo "$before" | awk '/^tessera_store_commits_total/ {print $2}')
  local o0; o0=$(echo "$before" | awk '/^tessera_store_ops_total/ {print $2}')
  local t0; t0=$(cpu_ticks "$pid")
  TOKENS_FILE="$dir/tokens" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s bench/capabilities.lua \
    "http://127.0.0.1:$PORT/v1/capabilities" > "$OUT/$name.txt" 2> "$OUT/$name.err" || true
  local cpu; cpu=$(cpu_per_req $(( $(cpu_ticks "$pid") - t0 )) "$OUT/$name.txt")
  local after c1
  after=$(curl -s "http://127.0.0.1:$PORT/metrics")
  c1=$(echo "$after" | awk '/^tessera_store_commits_total/ {print $2}')
  local o1; o1=$(echo "$after" | awk '/^tessera_store_ops_total/ {print $2}')
  local ops_per_commit; ops_per_commit=$(awk -v o=$((o1 - o0)) -v c=$((c1 - c0)) 'BEGIN { if (c > 0) printf "%.1f", o / c; else print "-" }')
  record "$name" "$OUT/$name.txt" "$ops_per_commit" "$cpu"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

wants() { [[ " $TARGETS " == *" $1 "* ]]; }

if wants ceiling; then
# Ceiling: sign only.
"$CEILING" "127.0.0.1:$PORT" &
pids+=("$!")
wait_ready_ceiling() {
  for _ in $(seq 1 100); do
    curl -s -o /dev/null -H 'content-type: application/json' -d '{"action":"a","resource":"b:c"}' \
      "http://127.0.0.1:$PORT/v1/capabilities" && return 0
    sleep 0.1
  done
  return 1
}
wait_ready_ceiling
run_wrk "ceiling (sign only)" bench/ceiling.lua "${pids[-1]}"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
fi

if wants sqlite; then
  bench_broker "tessera sqlite" "sqlite://$(mktemp -d)/bench.db"
fi

if wants postgres; then
  psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS tessera_bench" -qc "CREATE DATABASE tessera_bench" 2>/dev/null
  bench_broker "tessera postgres" "$PG_URL/tessera_bench"
fi

echo
cat "$RESULTS"
