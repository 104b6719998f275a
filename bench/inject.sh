#!/usr/bin/env bash
# Credential-injection benchmark: HTTPS requests on keep-alive connections,
# directly to the API, through a gateway tunnel (host without a rule: decided once
# per connection), and intercepted (host with a rule: the gateway terminates TLS,
# decides each request with Cedar, records it before sending — committed to
# SQLite, synchronous = FULL — injects a bearer secret, forwards over verified TLS,
# records the response). Interleaved rounds of one run (the machine is noisy).
# Loopback only: the API, a DNS server answering 127.0.0.1, the broker and the
# load generator (broker/examples/gateway_load.rs) all listen on 127.0.0.1.
#
#   bench/inject.sh                          # 5 rounds, 10 s, 16 workers
#   ROUNDS=3 SECS=5 WORKERS=8 bench/inject.sh
#   PERF=1 bench/inject.sh                   # also: perf record of the broker, injected load only
#
# Results: bench/out/inject.md.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-10}
WORKERS=${WORKERS:-16}
PORT=${PORT:-8721}
GW=${GW:-8722}
API=${API:-8723}
DNS=${DNS:-8724}
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
cat > "$dir/policy/inject.cedar" <<CEDAR
@id("bench-connect")
@allow_addresses("127.0.0.0/8")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "*.bench.test:$API" };

@id("bench-api-get")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"GET", resource)
when { resource.backend == "api" && resource.path == "/small" };
CEDAR
cat bench/tessera.toml > "$dir/tessera.toml"
cat >> "$dir/tessera.toml" <<TOML

[backends.net]
kind = "net"

[backends.api]
kind = "http"
hosts = ["api.bench.test:$API"]
requests = ["GET /small"]
secret_env = "BENCH_API_SECRET"

[gateway]
listen = "127.0.0.1:$GW"
nameservers = ["127.0.0.1:$DNS"]
upstream_roots = "$dir/api-ca.pem"
TOML

"$LOAD" dns "$DNS" &
pids+=($!)
"$LOAD" api "$API" "$dir/api-ca.pem" &
pids+=($!)
for _ in $(seq 1 50); do [ -s "$dir/api-ca.pem" ] && break; sleep 0.1; done
BENCH_API_SECRET=bench-secret-value TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" serve --dev --config "$dir/tessera.toml" --data-dir "$dir" --policy-dir "$dir/policy" \
  --listen "127.0.0.1:$PORT" 2> "$OUT/inject.server.log" &
broker=$!
pids+=("$broker")
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
: > "$dir/sessions"
for i in $(seq 1 "$WORKERS"); do
  token=$(curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
    -d "{\"user\":\"alice\",\"task\":{\"id\":\"bench-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
    "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token)
  curl -sf -X POST -H "Authorization: Bearer $token" "http://127.0.0.1:$PORT/v1/gateway/session" \
    | jq -r .ca_pem > "$dir/run-ca-$i.pem"
  # A tunnelled request trusts the API's own CA; an intercepted one the run's.
  echo "$token $dir/run-ca-$i.pem" >> "$dir/sessions"
  echo "$token $dir/api-ca.pem" >> "$dir/tunnel-sessions"
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
per_req() { # ticks, ok-count
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n > 0) printf "%.0f", t * 1e6 / hz / n; else print "-" }'
}
ok_of() { echo "$1" | sed -E 's/.*\(([0-9]+) ok.*/\1/'; }
RESULTS="$OUT/inject.md"
{
  echo "# Credential injection — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "$ROUNDS interleaved rounds, $(nproc) cores, loopback; $WORKERS workers for $SECS s, each on one"
  echo "keep-alive TLS connection sending GET /small (13 bytes) again and again."
  echo
  echo "| round | direct req/s | tunnel req/s | injected req/s | broker CPU µs/req (tunnel) | broker CPU µs/req (injected) |"
  echo "|---|---|---|---|---|---|"
} > "$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  d=$("$LOAD" requests api.bench.test "$API" "$SECS" "$WORKERS" "$dir/api-ca.pem")
  t0=$(cpu_ticks "$broker")
  t=$("$LOAD" requests tunnel.bench.test "$API" "$SECS" "$WORKERS" "$dir/api-ca.pem" "127.0.0.1:$GW" "$dir/tunnel-sessions")
  t1=$(cpu_ticks "$broker")
  i=$("$LOAD" requests api.bench.test "$API" "$SECS" "$WORKERS" "$dir/api-ca.pem" "127.0.0.1:$GW" "$dir/sessions")
  t2=$(cpu_ticks "$broker")
  ct=$(per_req $((t1 - t0)) "$(ok_of "$t")")
  ci=$(per_req $((t2 - t1)) "$(ok_of "$i")")
  echo "| $r | ${d%% *} | ${t%% *} | ${i%% *} | $ct | $ci |" >> "$RESULTS"
  echo "bench: round $r: direct $d; tunnel $t (broker $ct us/req); injected $i (broker $ci us/req)"
done
if [ -n "${PERF:-}" ]; then
  perf record -F 999 -g -o "$OUT/inject.perf.data" -p "$broker" -- sleep "$SECS" >/dev/null 2>&1 &
  perf_pid=$!
  "$LOAD" requests api.bench.test "$API" "$SECS" "$WORKERS" "$dir/api-ca.pem" "127.0.0.1:$GW" "$dir/sessions"
  wait "$perf_pid" || true
  echo "bench: perf report -i $OUT/inject.perf.data --no-children"
fi
echo "bench: results in $RESULTS"
