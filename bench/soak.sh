#!/usr/bin/env bash
# Store growth under a soak, with and without retention, side by side: the same
# build serves the same load (bench/soak.lua: start a run, issue CAPS
# capabilities, end it, on CONNS connections) for DURATION, once with
# `retention.runs = "off"` (A) and once with runs pruned RETAIN after they end
# (B, the pruner every 10 s), interleaved ROUNDS times. Every 10 s it samples the
# SQLite file and its WAL; it reports requests, bytes per request and the size
# reached, per variant.
#
#   BIN=$CARGO_TARGET_DIR/release/tessera bench/soak.sh
#   DURATION=180 ROUNDS=1 RETAIN=1m bench/soak.sh
#
# Needs wrk, curl, jq. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-180}
ROUNDS=${ROUNDS:-1}
RETAIN=${RETAIN:-1m}
CONNS=${CONNS:-2}
CAPS=${CAPS:-10}
PORT=${PORT:-8703}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera
  BIN="$TARGET/release/tessera"
fi

work=$(mktemp -d)
trap '[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

one() { # $1 = label, $2 = runs retention
  local dir="$work/$1-$3"
  mkdir -p "$dir"
  { cat bench/tessera.toml; printf '\n[retention]\nruns = "%s"\ninterval = "10s"\n' "$2"; } > "$dir/tessera.toml"
  TESSERA_LOG=warn,tessera_broker::jobs::retention=info TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" TESSERA_STORE_URL="sqlite://$dir/soak.db" \
    "$BIN" serve --dev --config "$dir/tessera.toml" --data-dir "$dir" --policy-dir bench/policy \
    --listen "127.0.0.1:$PORT" 2> "$dir/server.log" &
  pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  local key
  key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
    "$BIN" runtimes create soak --users '*' --task-kinds '*' --json | jq -r .key)
  RUNTIME_KEY="$key" CAPS="$CAPS" wrk -t"$CONNS" -c"$CONNS" -d"${DURATION}s" -s bench/soak.lua \
    "http://127.0.0.1:$PORT/" > "$dir/wrk.txt" 2> "$dir/wrk.err" &
  local load=$!
  local t=0 size=0
  : > "$dir/sizes"
  while kill -0 "$load" 2>/dev/null; do
    sleep 10
    t=$((t + 10))
    size=$(( $(stat -c %s "$dir/soak.db") + $(stat -c %s "$dir/soak.db-wal" 2>/dev/null || echo 0) ))
    echo "$t $size" >> "$dir/sizes"
  done
  wait "$load" || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  pid=
  local requests
  requests=$(awk '/requests in/ {print $1}' "$dir/wrk.txt")
  local last
  last=$(tail -1 "$dir/sizes" | awk '{print $2}')
  local half
  half=$(awk -v d="$DURATION" '$1 >= d/2 {print $2; exit}' "$dir/sizes")
  local pruned
  pruned=$(grep -c "retention: pruned" "$dir/server.log" || true)
  printf '%s round %s: %s requests in %ss (%s/s), file %s B (%s B/request), second half +%s B (%s B/request), %s prune passes, errors %s\n' \
    "$1" "$3" "$requests" "$DURATION" "$((requests / DURATION))" "$last" "$((last / (requests > 0 ? requests : 1)))" \
    "$((last - half))" "$(( (last - half) * 2 / (requests > 0 ? requests : 1) ))" "$pruned" "$(wc -l < "$dir/wrk.err")"
  sed 's/^/  /' "$dir/sizes" | tr '\n' ' '; echo
}

for r in $(seq 1 "$ROUNDS"); do
  one "A(retention off)" off "$r"
  one "B(runs=$RETAIN)" "$RETAIN" "$r"
done
