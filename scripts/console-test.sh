#!/usr/bin/env bash
# The web console's browser tests: tests/console/console.test.mjs drives
# Debian's Chromium (through playwright-core, pinned in tests/console's lock
# file) against a real `tessera serve --dev` it starts on a free loopback port.
#
#   scripts/console-test.sh install     Debian's chromium (as root, if missing) and `npm ci`
#   scripts/console-test.sh run BIN     node --test tests/console/ against the tessera binary BIN
#
# Playwright never downloads a browser here: the tests launch /usr/bin/chromium.
# Without it the tests are skipped on a developer's machine and fail under
# CI=true. On a failure, screenshots of the open pages go to
# tests/console/artifacts/ (their paths are printed). CONSOLE_SCREENSHOTS=DIR
# also saves named screenshots of each page into DIR (docs/console for the docs).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=tests/console
cache="${TESSERA_CACHE_DIR:-${HOME:-/root}/.cache/tessera}"

install() {
  if [[ ! -x /usr/bin/chromium ]]; then
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
    elif [[ "${CI:-}" == true ]]; then
      echo "console-test: /usr/bin/chromium is missing and this is not root: cannot install it" >&2
      return 1
    else
      echo "console-test: /usr/bin/chromium is missing (apt-get install chromium as root); the tests will be skipped" >&2
    fi
  fi
  command -v npm >/dev/null || { echo "console-test: npm is missing (apt-get install npm)" >&2; return 1; }
  # The lock file pins playwright-core; it downloads no browser.
  (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --cache "$cache/npm" --no-audit --no-fund --loglevel=error)
}

run() {
  local bin=${1:-}
  if [[ -z "$bin" ]]; then
    echo "usage: scripts/console-test.sh run BIN (the built tessera binary)" >&2
    return 2
  fi
  if [[ ! -x "$bin" ]]; then
    echo "console-test: $bin is not an executable" >&2
    return 1
  fi
  if [[ ! -d "$dir/node_modules/playwright-core" ]]; then
    echo "console-test: playwright-core is not installed: scripts/console-test.sh install" >&2
    return 1
  fi
  if [[ ! -x /usr/bin/chromium && "${CI:-}" == true ]]; then
    echo "console-test: /usr/bin/chromium is missing (CI=true: failing, not skipping)" >&2
    return 1
  fi
  rm -rf "$dir/artifacts"
  TESSERA_BIN="$(realpath "$bin")" node --test --test-reporter=spec "$dir"/*.test.mjs
}

case "${1:-}" in
  install) install ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/console-test.sh install | run BIN" >&2; exit 2 ;;
esac
