#!/usr/bin/env bash
# The Python SDK (client-lib/python) and its tests against a real broker.
#
#   scripts/python.sh install          create the virtualenv (once per lock) with the
#                                      hash-pinned test dependencies and the SDK
#   scripts/python.sh python           install if needed, then print the virtualenv's python
#   scripts/python.sh run TESSERA_BIN  install if needed, then pytest client-lib/python/tests
#                                      (and examples/mcp/tests when it exists) with
#                                      TESSERA_BIN naming the broker binary to start
#   scripts/python.sh lock             regenerate client-lib/python/requirements-test.lock
#                                      from requirements-test.in (pip-tools in a throwaway venv)
#
# The virtualenv lives under a cache directory, outside the work tree, so several
# clones share one install: ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/.venv-python.
# It is rebuilt whenever the lock changes (the stamp file is named by the lock's
# SHA-256). Every package comes from the lock with --require-hashes; the SDK is
# installed from this clone with --no-deps (editable, and put first on PYTHONPATH
# by `run`, so the code tested is always this clone's).
#
# `run` fails on any failure, on no test collected, and on any skip (a skipped or
# xfailed test, or a module skipped at collection; tessera_strict): the
# tests need the broker binary, PostgreSQL on 127.0.0.1:5432 and moto
# (scripts/moto.sh), and a missing one fails them — they never skip.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sdk="$root/client-lib/python"
lock="$sdk/requirements-test.lock"
cache="${TESSERA_CACHE_DIR:-${HOME:-/root}/.cache/tessera}"
venv="$cache/.venv-python"
lock_hash="$(sha256sum "$lock" | cut -c1-16)"
stamp="$venv/.tessera-python-$lock_hash"
sdk_stamp="$venv/.tessera-python-sdk"

install_sdk() {
  # Re-pointed at this clone when another clone installed it last.
  if [[ -f "$sdk_stamp" && "$(cat "$sdk_stamp")" == "$sdk" ]]; then
    return 0
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation --no-index -e "$sdk" >&2
  printf '%s' "$sdk" >"$sdk_stamp"
}

install() {
  if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
    exec 9>"$cache/.venv-python.lock"
    flock 9
    install_sdk
    exec 9>&-
    return 0
  fi
  mkdir -p "$cache"
  # One installer at a time (several test runs may ask at once).
  exec 9>"$cache/.venv-python.lock"
  flock 9
  if [[ ! -f "$stamp" || ! -x "$venv/bin/python" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes \
      --only-binary :all: -r "$lock" >&2
    install_sdk
    "$venv/bin/python" -c "import tessera, httpx, cryptography, boto3, psycopg, pytest" >&2
    touch "$stamp"
    echo "python: test dependencies of $lock installed in $venv" >&2
  else
    install_sdk
  fi
  exec 9>&-
}

run() {
  local bin="${1:-}"
  if [[ -z "$bin" ]]; then
    echo "usage: scripts/python.sh run TESSERA_BIN" >&2
    exit 2
  fi
  bin="$(realpath -m -- "$bin")"
  if [[ ! -x "$bin" ]]; then
    echo "python: $bin is not an executable broker binary" >&2
    exit 1
  fi
  install
  local paths=("$sdk/tests")
  if [[ -d "$root/examples/mcp/tests" ]]; then
    paths+=("$root/examples/mcp/tests")
  fi
  cd "$root"
  local status=0
  TESSERA_BIN="$bin" PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH="$sdk/src:$sdk/tests/plugins${PYTHONPATH:+:$PYTHONPATH}" \
    "$venv/bin/python" -m pytest -q -p tessera_strict -p no:cacheprovider \
    --rootdir "$root" -c "$sdk/pytest.ini" "${paths[@]}" || status=$?
  if [[ $status -eq 5 ]]; then
    echo "python: no test was collected" >&2
    exit 1
  fi
  exit "$status"
}

lock() {
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  python3 -m venv "$tmp/venv" >&2
  "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check pip-tools >&2
  (cd "$sdk" && "$tmp/venv/bin/pip-compile" -q --generate-hashes --allow-unsafe \
    --strip-extras --no-emit-index-url --no-emit-find-links \
    -o requirements-test.lock requirements-test.in)
}

case "${1:-}" in
  install) install ;;
  python) install; echo "$venv/bin/python" ;;
  run) shift; run "$@" ;;
  lock) lock ;;
  *) echo "usage: scripts/python.sh install|python|run TESSERA_BIN|lock" >&2; exit 2 ;;
esac
