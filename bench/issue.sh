#!/usr/bin/env bash
# Load benchmark for POST /v1/capabilities: durable (committed before the token is
# returned), policy evaluated, signed, audited — on SQLite and on PostgreSQL — and,
# in the same run, a bare axum endpoint that only signs an Ed25519 JWT (the ceiling).
#
#   bench/issue.sh                 # defaults: 64 connections, 2 wrk threads, 15 s each
#   DURATION=30s CONNS=64 bench/issue.sh
#   TARGETS="sqlite" bench/issue.sh   # any of: ceiling sqlite postgres
#   BIN=/tmp/other/tessera TARGETS=sqlite bench/issue.sh   # measure another build
#   ROUNDS=8 bench/issue.sh        # 8 rounds, each every target in turn; ratios and medians
#   ROUNDS=8 BIN_B=/tmp/new/tessera bench/issue.sh   # A/B: BIN and BIN_B in the same rounds
#
# ROUNDS=N (default 1: one pass, as before) runs every target of TARGETS in
# order (ceiling, sqlite, postgres) N times, so the load on the machine drifts
# over all of them alike, then appends to the results the per-round ratios to
# the ceiling (req/s over the ceiling's req/s of the same round), their median
# and min–max, and each target's median req/s, p50, p99 and server CPU per
# request. BIN_B=/path/to/tessera adds targets sqlite-B and postgres-B (that
# build on the same store), run next to sqlite and postgres in every round (A
# first in odd rounds, B first in even ones), with their ratios to the ceiling
# and to A. CEILING=/path/to/sign_ceiling uses another ceiling binary;
# CEILING_B=/path/to/sign_ceiling (with BIN_B) runs B's own ceiling next to
# A's in every round (target ceiling-B), and B's ratios are to it: for builds
# that differ in how everything is compiled (a profile), not only the broker.
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
ROUNDS=${ROUNDS:-1}
BIN_B=${BIN_B:-}
CEILING_B=${CEILING_B:-}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=bench/out
mkdir -p "$OUT"

for tool in wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install $tool)" >&2; exit 1; }
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ROUNDS must be a positive integer, not $ROUNDS" >&2; exit 1; }
if [ -n "$BIN_B" ] && [ ! -x "$BIN_B" ]; then
  echo "bench: BIN_B=$BIN_B is not an executable" >&2; exit 1
fi
if [ -n "$CEILING_B" ] && { [ -z "$BIN_B" ] || [ ! -x "$CEILING_B" ]; }; then
  echo "bench: CEILING_B needs BIN_B and must be an executable" >&2; exit 1
fi
# Rounds mode: more than one round, or two builds compared.
ROUNDS_MODE=
if [ "$ROUNDS" -gt 1 ] || [ -n "$BIN_B" ]; then ROUNDS_MODE=1; fi

# BIN=/path/to/tessera compares another build of the broker (nothing is rebuilt).
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera --example sign_ceiling
  BIN="$TARGET/release/tessera"
fi
CEILING=${CEILING:-"$TARGET/release/examples/sign_ceiling"}

RESULTS="$OUT/results.md"
# One line per measurement for the rounds summary:
# round, target, req/s, p50 (ms), p99 (ms), server CPU µs/req.
ROUNDS_TSV="$OUT/rounds.tsv"
: > "$ROUNDS_TSV"
{
  echo "# POST /v1/capabilities — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "wrk -t$THREADS -c$CONNS -d$DURATION, $RUNS runs, $(nproc) cores, loopback; load generator on the same machine."
  if [ -n "$ROUNDS_MODE" ]; then
    echo
    echo "$ROUNDS rounds, each: $TARGETS. A = $BIN${BIN_B:+, B = $BIN_B}."
  fi
  echo
  echo "| target | req/s | p50 | p99 | non-2xx | ops per commit | server CPU µs/req |"
  echo "|---|---|---|---|---|---|---|"
} > "$RESULTS"

# The one server running at a time (never a stale pid: it is cleared once stopped).
SERVER_PID=
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

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

# The round and target being measured, for the rounds summary.
ROUND=1
KEY=

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
  # wrk's latencies carry a unit (812.00us, 6.12ms, 1.02s, 2.00m): in ms here.
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$ROUND" "$KEY" "${rps:--}" \
    "$(to_ms "$p50")" "$(to_ms "$p99")" "${cpu:--}" >> "$ROUNDS_TSV"
}

# to_ms LATENCY -> milliseconds, or - if wrk printed none
to_ms() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) printf "%.4f", v / 1000
    else if (v ~ /ms$/) printf "%.4f", v + 0
    else if (v ~ /s$/) printf "%.4f", v * 1000
    else if (v ~ /m$/) printf "%.4f", v * 60000
    else if (v ~ /h$/) printf "%.4f", v * 3600000
    else print "-"
  }'
}

# bench_broker NAME STORE_URL [BINARY]
bench_broker() {
  local name=$1 store=$2 bin=${3:-$BIN}
  local dir; dir=$(mktemp -d)
  TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" TESSERA_STORE_URL="$store" \
    "$bin" serve --dev --config bench/tessera.toml --data-dir "$dir" --policy-dir bench/policy \
    --listen "127.0.0.1:$PORT" 2> "$OUT/$name.server.log" &
  local pid=$!
  SERVER_PID=$pid
  wait_ready /readyz
  local key
  key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
    "$bin" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
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
  local h0; h0=$(echo "$before" | awk '/^tessera_audit_head_held_seconds_total/ {print $2}')
  local w0; w0=$(date +%s.%N)
  local t0; t0=$(cpu_ticks "$pid")
  TOKENS_FILE="$dir/tokens" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s bench/capabilities.lua \
    "http://127.0.0.1:$PORT/v1/capabilities" > "$OUT/$name.txt" 2> "$OUT/$name.err" || true
  local cpu; cpu=$(cpu_per_req $(( $(cpu_ticks "$pid") - t0 )) "$OUT/$name.txt")
  local after c1
  after=$(curl -s "http://127.0.0.1:$PORT/metrics")
  c1=$(echo "$after" | awk '/^tessera_store_commits_total/ {print $2}')
  local o1; o1=$(echo "$after" | awk '/^tessera_store_ops_total/ {print $2}')
  local ops_per_commit; ops_per_commit=$(awk -v o=$((o1 - o0)) -v c=$((c1 - c0)) 'BEGIN { if (c > 0) printf "%.1f", o / c; else print "-" }')
  # The audit chain head: how long batches held it, out of the wall time. On
  # PostgreSQL every replica's batches queue on it, so writes/s over that
  # fraction is what all replicas together could reach at this batch size.
  local h1; h1=$(echo "$after" | awk '/^tessera_audit_head_held_seconds_total/ {print $2}')
  local wall; wall=$(awk -v a="$w0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  awk -v h="$(awk -v a="${h0:-0}" -v b="${h1:-0}" 'BEGIN { print b - a }')" -v w="$wall" \
      -v o=$((o1 - o0)) -v c=$((c1 - c0)) -v n="$name" 'BEGIN {
    if (h > 0 && c > 0) printf "%s: audit head held %.2f s of %.2f s (%.0f%%), %.2f ms per batch of %.1f writes; %.0f writes/s now, at most %.0f writes/s for all replicas together at this batch size\n",
      n, h, w, 100 * h / w, 1000 * h / c, o / c, o / w, o / h }' | tee -a "$OUT/head.txt"
  record "$name" "$OUT/$name.txt" "$ops_per_commit" "$cpu"
  stop_server
  rm -rf "$dir"
}

wants() { [[ " $TARGETS " == *" $1 "* ]]; }

# Ceiling: sign only.
bench_ceiling() {
  local name=$1 ceiling=${2:-$CEILING}
  "$ceiling" "127.0.0.1:$PORT" &
  SERVER_PID=$!
  local up=
  for _ in $(seq 1 100); do
    curl -s -o /dev/null -H 'content-type: application/json' -d '{"action":"a","resource":"b:c"}' \
      "http://127.0.0.1:$PORT/v1/capabilities" && { up=1; break; }
    sleep 0.1
  done
  [ -n "$up" ] || { echo "bench: the ceiling on port $PORT did not come up" >&2; return 1; }
  run_wrk "$name" bench/ceiling.lua "$SERVER_PID"
  stop_server
}

# bench_postgres NAME BINARY: a fresh database for every measurement.
bench_postgres() {
  psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS tessera_bench" -qc "CREATE DATABASE tessera_bench" 2>/dev/null
  bench_broker "$1" "$PG_URL/tessera_bench" "$2"
}

# run_target KEY: one measurement of ceiling, sqlite, sqlite-B, postgres or postgres-B.
run_target() {
  KEY=$1
  local suffix=
  if [ -n "$ROUNDS_MODE" ]; then suffix=", round $ROUND"; fi
  case $KEY in
    ceiling) bench_ceiling "ceiling (sign only)$suffix" ;;
    ceiling-B) bench_ceiling "ceiling (sign only) B$suffix" "$CEILING_B" ;;
    sqlite) bench_broker "tessera sqlite$suffix" "sqlite://$(mktemp -d)/bench.db" "$BIN" ;;
    sqlite-B) bench_broker "tessera sqlite B$suffix" "sqlite://$(mktemp -d)/bench.db" "$BIN_B" ;;
    postgres) bench_postgres "tessera postgres$suffix" "$BIN" ;;
    postgres-B) bench_postgres "tessera postgres B$suffix" "$BIN_B" ;;
  esac
}

# A store target and, with BIN_B, the same store under B: A first in odd
# rounds, B first in even ones (neither always runs on the warmer machine).
run_store() {
  if [ -z "$BIN_B" ]; then run_target "$1"
  elif [ $((ROUND % 2)) -eq 1 ]; then run_target "$1"; run_target "$1-B"
  else run_target "$1-B"; run_target "$1"
  fi
}

for ROUND in $(seq 1 "$ROUNDS"); do
  if [ -n "$ROUNDS_MODE" ]; then echo "bench: round $ROUND of $ROUNDS"; fi
  if wants ceiling; then
    if [ -n "$CEILING_B" ]; then run_store ceiling; else run_target ceiling; fi
  fi
  if wants sqlite; then run_store sqlite; fi
  if wants postgres; then run_store postgres; fi
done

# The rounds summary: per-round req/s and ratios, then medians and spreads.
if [ -n "$ROUNDS_MODE" ]; then
  awk -F'\t' -v rounds="$ROUNDS" '
    function num(v) { return v != "" && v != "-" }
    # median and min-max of the n values in a[1..n] (sorted here)
    function sort(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    }
    function median(a, n) { sort(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    # collect FIELD of target T over the rounds into out[]; returns how many
    function column(t, f, out,   r, n) {
      n = 0; split("", out)
      for (r = 1; r <= rounds; r++) if (((r, t) in val) && num(val[r, t, f])) out[++n] = val[r, t, f] + 0
      return n
    }
    # the ratio NUM/DEN of round r, or "" when either is missing
    function ratio(r, nt, dt) {
      if (!((r, nt) in val) || !((r, dt) in val)) return ""
      if (!num(val[r, nt, 3]) || !num(val[r, dt, 3]) || val[r, dt, 3] == 0) return ""
      return val[r, nt, 3] / val[r, dt, 3]
    }
    {
      val[$1, $2] = 1
      for (f = 3; f <= 6; f++) val[$1, $2, f] = $f
      if (!($2 in seen)) { seen[$2] = 1; order[++nt] = $2 }
    }
    END {
      # the ratios that can be formed from what ran
      for (i = 1; i <= nt; i++) {
        t = order[i]
        # the B targets over the B ceiling when there is one (CEILING_B)
        c = (t ~ /-B$/ && ("ceiling-B" in seen)) ? "ceiling-B" : "ceiling"
        if (t !~ /^ceiling/ && (c in seen)) { rn[++nr] = t; rd[nr] = c }
      }
      for (i = 1; i <= nt; i++) {
        t = order[i]
        if (t ~ /-B$/) { a = substr(t, 1, length(t) - 2); if (a in seen) { rn[++nr] = t; rd[nr] = a } }
      }
      print ""
      print "## Rounds"
      print ""
      head = "| round |"; rule = "|---|"
      for (i = 1; i <= nt; i++) { head = head " " order[i] " req/s |"; rule = rule "---|" }
      for (k = 1; k <= nr; k++) { head = head " " rn[k] "/" rd[k] " |"; rule = rule "---|" }
      print head; print rule
      for (r = 1; r <= rounds; r++) {
        line = "| " r " |"
        for (i = 1; i <= nt; i++) {
          v = ((r, order[i]) in val) ? val[r, order[i], 3] : "-"
          line = line " " (num(v) ? sprintf("%.0f", v) : "-") " |"
        }
        for (k = 1; k <= nr; k++) {
          q = ratio(r, rn[k], rd[k])
          line = line " " (q == "" ? "-" : sprintf("%.3f", q)) " |"
        }
        print line
      }
      print ""
      print "## Over " rounds (rounds == 1 ? " round" : " rounds")
      print ""
      if (nr > 0) {
        print "| ratio | median | min–max | rounds |"
        print "|---|---|---|---|"
        for (k = 1; k <= nr; k++) {
          n = 0; split("", xs)
          for (r = 1; r <= rounds; r++) { q = ratio(r, rn[k], rd[k]); if (q != "") xs[++n] = q }
          if (n == 0) { print "| " rn[k] "/" rd[k] " | - | - | 0 |"; continue }
          m = median(xs, n)
          printf "| %s/%s | %.3f | %.3f–%.3f | %d |\n", rn[k], rd[k], m, xs[1], xs[n], n
        }
        print ""
      }
      print "| target | median req/s | median p50 | median p99 | median server CPU µs/req | rounds |"
      print "|---|---|---|---|---|---|"
      for (i = 1; i <= nt; i++) {
        t = order[i]; line = "| " t " |"
        n = column(t, 3, xs); line = line " " (n ? sprintf("%.0f", median(xs, n)) : "-") " |"; runs = n
        n = column(t, 4, xs); line = line " " (n ? sprintf("%.2fms", median(xs, n)) : "-") " |"
        n = column(t, 5, xs); line = line " " (n ? sprintf("%.2fms", median(xs, n)) : "-") " |"
        n = column(t, 6, xs); line = line " " (n ? sprintf("%.0f", median(xs, n)) : "-") " |"
        print line " " runs " |"
      }
    }' "$ROUNDS_TSV" >> "$RESULTS"
fi

echo
cat "$RESULTS"
