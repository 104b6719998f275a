#!/usr/bin/env bash
# Load benchmark for POST /v1/exchange (capability -> token-backend JWT) on SQLite,
# comparing builds side by side in interleaved rounds (the machine is noisy):
#
#   bench/exchange.sh                                   # this build, 3 rounds
#   A=/tmp/old/tessera B=target/release/tessera bench/exchange.sh
#   ROUNDS=5 DURATION=10s CONNS=64 bench/exchange.sh
#
# Each round starts each build on a fresh SQLite store with bench/tessera.toml and
# bench/policy, issues RUNS x CAPS capabilities (20 uses each) and exchanges them
# round-robin with wrk for DURATION. Needs wrk, curl and jq. Loopback only.
# Results: bench/out/exchange.md.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
RUNS=${RUNS:-64}
CAPS=${CAPS:-32}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-8702}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=bench/out
mkdir -p "$OUT"

for tool in wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install $tool)" >&2; exit 1; }
done
if [ -z "${B:-}" ]; then
  cargo build --release --locked --bin tessera
  B="$TARGET/release/tessera"
fi
builds=("$B")
[ -n "${A:-}" ] && builds=("$A" "$B")

RESULTS="$OUT/exchange.md"
{
  echo "# POST /v1/exchange — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "wrk -t$THREADS -c$CONNS -d$DURATION, $((RUNS * CAPS)) capabilities of 20 uses, SQLite, $(nproc) cores, loopback."
  echo
  echo "| round | build | req/s | p50 | p99 | non-2xx | server CPU µs/req | reload with every capability live |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$RESULTS"

pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

bench_one() {
  local round=$1 bin=$2 dir; dir=$(mktemp -d)
  TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" TESSERA_STORE_URL="sqlite://$dir/bench.db" \
    "$bin" serve --dev --config bench/tessera.toml --data-dir "$dir" --policy-dir bench/policy \
    --listen "127.0.0.1:$PORT" 2> "$OUT/exchange.server.log" &
  pid=$!
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  local key
  key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
    "$bin" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
  for i in $(seq 1 "$RUNS"); do
    curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
      -d "{\"user\":\"alice\",\"task\":{\"id\":\"bench-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
      "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token
  done > "$dir/runs"
  # CAPS capabilities per run, four requests at a time.
  while read -r run; do
    for c in $(seq 1 "$CAPS"); do echo "$run $c"; done
  done < "$dir/runs" | xargs -P4 -n2 sh -c \
    'curl -sf -H "Authorization: Bearer $0" -H "content-type: application/json" \
       -d "{\"action\":\"read\",\"resource\":\"svc-reports:reports/$1.csv\"}" \
       http://127.0.0.1:'"$PORT"'/v1/capabilities | jq -r .token' > "$dir/caps"
  # A reload while every capability is live (the new build re-decides each one).
  local reload_ms
  reload_ms=$(curl -s -o /dev/null -w '%{time_total}' -X POST -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    "http://127.0.0.1:$PORT/v1/admin/policy/reload" | awk '{printf "%.0f ms", $1 * 1000}')
  local log="$OUT/exchange-$round.txt"
  local t0; t0=$(cpu_ticks "$pid")
  TOKENS_FILE="$dir/caps" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s bench/exchange.lua \
    "http://127.0.0.1:$PORT/v1/exchange" > "$log" 2>/dev/null || true
  local ticks=$(( $(cpu_ticks "$pid") - t0 ))
  local rps p50 p99 non2xx reqs cpu
  rps=$(awk '/Requests\/sec/ {print $2}' "$log")
  p50=$(awk '$1=="50%" {print $2}' "$log")
  p99=$(awk '$1=="99%" {print $2}' "$log")
  non2xx=$(awk '/Non-2xx/ {print $5}' "$log"); non2xx=${non2xx:-0}
  reqs=$(awk '/requests in/ {print $1}' "$log")
  cpu=$(awk -v t="$ticks" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (r > 0) printf "%.0f", t * 1e6 / hz / r; else print "-" }')
  echo "| $round | $bin | $rps | $p50 | $p99 | $non2xx | $cpu | $reload_ms |" >> "$RESULTS"
  echo "bench: round $round $bin: $rps req/s, p50 $p50, p99 $p99, non-2xx $non2xx, $cpu us/req, reload $reload_ms ($(wc -l < "$dir/caps") capabilities)"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  rm -rf "$dir"
}

for round in $(seq 1 "$ROUNDS"); do
  for bin in "${builds[@]}"; do bench_one "$round" "$bin"; done
done
echo
cat "$RESULTS"
