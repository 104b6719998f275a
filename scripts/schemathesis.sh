#!/usr/bin/env bash
# Schemathesis (PyPI) against a live broker: the OpenAPI document the broker
# generates is the contract, and every response must keep it.
#
#   scripts/schemathesis.sh install      create the virtualenv (once), pinned version
#   scripts/schemathesis.sh run [BIN]    BIN defaults to the debug build of tessera
#
# `run` starts `tessera serve --dev` on a free loopback port with its own data
# directory, mints a runtime key, starts a run, and runs schemathesis once per
# credential kind (run token, runtime key, admin token), each for MAX_TIME
# seconds (default 40). It fails on a 5xx, on a status or header the operation
# does not document, on a body that violates the documented schema (an error
# code the operation does not list for that status included), and on a
# content type that is not the documented one. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION="4.32.5"
MAX_TIME=${MAX_TIME:-40}
cache="${TESSERA_CACHE_DIR:-${HOME:-/root}/.cache/tessera}"
venv="$cache/.venv-schemathesis"
stamp="$venv/.tessera-schemathesis-$ST_VERSION"

install() {
  if [[ -f "$stamp" && -x "$venv/bin/st" ]]; then
    return 0
  fi
  mkdir -p "$cache"
  exec 9>"$cache/.venv-schemathesis.lock"
  flock 9
  if [[ -f "$stamp" && -x "$venv/bin/st" ]]; then
    return 0
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "schemathesis==$ST_VERSION" >&2
  touch "$stamp"
  echo "schemathesis: $ST_VERSION installed in $venv" >&2
}

json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }

run() {
  install
  local bin=${1:-${CARGO_TARGET_DIR:-target}/debug/tessera}
  local dir port pid
  dir=$(mktemp -d)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" "$bin" serve --dev --listen "127.0.0.1:$port" \
    --data-dir "$dir" --policy-dir policy >"$dir/broker.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' RETURN
  local base="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    curl -sf "$base/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -sf "$base/readyz" >/dev/null || { cat "$dir/broker.log" >&2; echo "schemathesis: the broker did not start" >&2; return 1; }
  local admin runtime run_token
  admin=$(cat "$dir/admin.token")
  runtime=$(curl -sf -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
    -d '{"name":"schemathesis","users":"*","task_kinds":"*"}' "$base/v1/admin/runtimes" | json_field key)
  run_token=$(curl -sf -H "Authorization: Bearer $runtime" -H 'content-type: application/json' \
    -d '{"user":"alice","task":{"id":"t-1","kind":"summarize"},"ttl":"1h"}' "$base/v1/runs" | json_field run_token)
  local failed=0 name token
  # The admin token last: it may disable runtimes and rotate keys.
  for cred in "run-token:$run_token" "runtime-key:$runtime" "admin-token:$admin"; do
    name=${cred%%:*}
    token=${cred#*:}
    echo "== schemathesis: $name, ${MAX_TIME}s"
    # One worker: with two threads, hypothesis parses its filters' source with
    # `ast` in both at once, and CPython 3.11's ast is not thread-safe ("AST
    # constructor recursion depth mismatch", CPython gh-106905, fixed in 3.13):
    # a schemathesis error under load, not the broker's. The run is time-boxed
    # either way.
    if ! (cd "$dir" && "$venv/bin/st" run "$base/v1/openapi.json" \
      --header "Authorization: Bearer $token" \
      --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
      --max-time "$MAX_TIME" --workers 1 --request-timeout 10 --no-color \
      --seed 1 --suppress-health-check all); then
      failed=1
    fi
  done
  if ((failed)); then
    grep -v " INFO " "$dir/broker.log" | tail -20 >&2
    return 1
  fi
}

case "${1:-}" in
  install) install ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/schemathesis.sh install|run [BIN]" >&2; exit 2 ;;
esac
