#!/usr/bin/env bash
# Egress gateway benchmark: new connections per second and TLS throughput, each
# directly and through the gateway, in interleaved rounds of one run (the machine
# is noisy: A and B side by side). Loopback only: the upstreams, the broker and the
# load generator (broker/examples/gateway_load.rs) all listen on 127.0.0.1.
#
#   bench/gateway.sh                         # 5 rounds, 10 s, 32 workers, 512 MiB
#   ROUNDS=3 SECS=5 WORKERS=16 MIB=256 bench/gateway.sh
#   BIN=/tmp/other/tessera bench/gateway.sh  # another build of the broker
#
# Through the gateway every connection is authenticated, decided by Cedar,
# rate-charged and audited (committed to SQLite, synchronous = FULL) before it is
# connected, and its close is audited too. Results: bench/out/gateway.md.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-10}
WORKERS=${WORKERS:-32}
MIB=${MIB:-512}
PORT=${PORT:-8711}
GW=${GW:-8712}
HTTP=${HTTP:-8713}
TLS=${TLS:-8714}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=bench/out
mkdir -p "$OUT"
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required" >&2; exit 1; }
done
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera --example gateway_load
  BIN="$TARGET/release/tessera"
fi
LOAD="$TARGET/release/examples/gateway_load"

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/policy"
cp bench/policy/entities.json bench/policy/bench.cedar "$dir/policy/"
cp policy/schema.cedarschema "$dir/policy/"
cat > "$dir/policy/egress.cedar" <<CEDAR
@id("bench-egress")
@allow_addresses("127.0.0.0/8")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" &&
  (resource.path == "127.0.0.1:$HTTP" || resource.path == "127.0.0.1:$TLS") };
CEDAR
cat bench/tessera.toml > "$dir/tessera.toml"
cat >> "$dir/tessera.toml" <<TOML

[backends.net]
kind = "net"

[gateway]
listen = "127.0.0.1:$GW"
max_bytes_down_per_run = 1099511627776
TOML

"$LOAD" upstream "$HTTP" "$TLS" "$dir/ca.pem" &
pids+=($!)
TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" serve --dev --config "$dir/tessera.toml" --data-dir "$dir" --policy-dir "$dir/policy" \
  --listen "127.0.0.1:$PORT" 2> "$OUT/gateway.server.log" &
broker=$!
pids+=("$broker")
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
: > "$dir/tokens"
for i in $(seq 1 "$WORKERS"); do
  curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
    -d "{\"user\":\"alice\",\"task\":{\"id\":\"bench-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
    "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token >> "$dir/tokens"
done
token=$(head -1 "$dir/tokens")

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
RESULTS="$OUT/gateway.md"
{
  echo "# Egress gateway — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "$ROUNDS interleaved rounds, $(nproc) cores, loopback; conns: $WORKERS workers for $SECS s, one"
  echo "GET per new connection; stream: one TLS connection reading $MIB MiB."
  echo
  echo "| round | direct conn/s | gateway conn/s | broker CPU µs/conn | direct MiB/s | gateway MiB/s |"
  echo "|---|---|---|---|---|---|"
} > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  d=$("$LOAD" conns "$HTTP" "$SECS" "$WORKERS")
  t0=$(cpu_ticks "$broker")
  g=$("$LOAD" conns "$HTTP" "$SECS" "$WORKERS" "127.0.0.1:$GW" "$dir/tokens")
  t1=$(cpu_ticks "$broker")
  ds=$("$LOAD" stream "$TLS" "$dir/ca.pem" "$MIB")
  gs=$("$LOAD" stream "$TLS" "$dir/ca.pem" "$MIB" "127.0.0.1:$GW" "$token")
  ok=$(echo "$g" | sed -E 's/.*\(([0-9]+) ok.*/\1/')
  cpu=$(awk -v t=$((t1 - t0)) -v n="$ok" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n > 0) printf "%.0f", t * 1e6 / hz / n; else print "-" }')
  echo "| $r | ${d%% *} | ${g%% *} | $cpu | ${ds%% *} | ${gs%% *} |" >> "$RESULTS"
  echo "bench: round $r: direct $d; gateway $g (broker CPU $cpu us/conn); stream direct $ds; gateway $gs"
done
echo "bench: results in $RESULTS"
