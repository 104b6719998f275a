#!/usr/bin/env bash
# What an OAuth access token costs beside a capability: POST /oauth/token (RFC 8693
# token exchange, decided and recorded as a capability, signed as an at+jwt) and
# POST /v1/capabilities, on one broker (SQLite) in interleaved rounds, since the
# machine is noisy. Loopback only. Needs wrk, curl, jq. Results: bench/out/oauth.md.
#
#   bench/oauth.sh                      # a release build, 3 rounds of 10 s each
#   ROUNDS=5 DURATION=15s BIN=target/release/tessera bench/oauth.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
RUNS=${RUNS:-64}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-8703}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=bench/out
mkdir -p "$OUT"
for tool in wrk curl jq; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install $tool)" >&2; exit 1; }
done
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera
  BIN="$TARGET/release/tessera"
fi

dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
mkdir "$dir/policy"
cp policy/schema.cedarschema bench/policy/entities.json bench/policy/bench.cedar "$dir/policy/"
cat > "$dir/policy/notes.cedar" <<'CEDAR'
@id("bench-notes-read") @ttl("15m")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"notes:read", resource)
when { resource.kind == "oauth-resource" && resource.backend == "notes" };
CEDAR
{ cat bench/tessera.toml; cat <<TOML

[oauth]
issuer = "http://127.0.0.1:$PORT"

[backends.notes]
kind = "oauth-resource"
resource = "https://notes.bench/mcp"
scopes = ["notes:read"]
TOML
} > "$dir/tessera.toml"

TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" serve --dev --config "$dir/tessera.toml" --data-dir "$dir" --policy-dir "$dir/policy" \
  --listen "127.0.0.1:$PORT" 2> "$OUT/oauth.server.log" &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
for i in $(seq 1 "$RUNS"); do
  curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
    -d "{\"user\":\"alice\",\"task\":{\"id\":\"bench-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
    "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token
done > "$dir/tokens"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
RESULTS="$OUT/oauth.md"
{
  echo "# POST /oauth/token vs POST /v1/capabilities — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "One broker (SQLite), wrk -t$THREADS -c$CONNS -d$DURATION, $RUNS runs, $ROUNDS interleaved rounds, $(nproc) cores."
  echo
  echo "| round | endpoint | req/s | p50 | p99 | non-2xx | server CPU µs/req |"
  echo "|---|---|---|---|---|---|---|"
} > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
  for what in capabilities token; do
    script=bench/capabilities.lua path=/v1/capabilities
    [ "$what" = token ] && script=bench/token.lua path=/oauth/token
    t0=$(cpu_ticks)
    TOKENS_FILE="$dir/tokens" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$script" \
      "http://127.0.0.1:$PORT$path" > "$OUT/oauth-$what.txt" 2> "$OUT/oauth-$what.err" || true
    ticks=$(( $(cpu_ticks) - t0 ))
    log="$OUT/oauth-$what.txt"
    rps=$(awk '/Requests\/sec/ {print $2}' "$log")
    reqs=$(awk '/requests in/ {print $1}' "$log")
    cpu=$(awk -v t="$ticks" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (r > 0) printf "%.0f", t * 1e6 / hz / r; else print "-" }')
    p50=$(awk '$1=="50%" {print $2}' "$log"); p99=$(awk '$1=="99%" {print $2}' "$log")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$log")
    echo "| $round | $path | $rps | $p50 | $p99 | ${non2xx:-0} | $cpu |" >> "$RESULTS"
    echo "bench: round $round $path: $rps req/s, p99 $p99, CPU $cpu us/req"
  done
done
echo; cat "$RESULTS"
