#!/usr/bin/env bash
# moto, the STS/IAM/S3-compatible server the AWS backend's tests talk to on loopback.
#
#   scripts/moto.sh install   create the virtualenv (once) and install the pinned moto
#   scripts/moto.sh python    install if needed, then print the virtualenv's python
#
# The virtualenv lives under a cache directory, outside the work tree, so several
# clones share one install: ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/.venv-moto.
# The test harness (broker/tests/api/support/moto.rs) runs `scripts/moto.sh python` and starts
# tests/moto/launcher.py with it on 127.0.0.1 and a free port; a failure here fails
# the tests, it never skips them.
set -euo pipefail

MOTO_VERSION="5.2.5"
cache="${TESSERA_CACHE_DIR:-${HOME:-/root}/.cache/tessera}"
venv="$cache/.venv-moto"
stamp="$venv/.tessera-moto-$MOTO_VERSION"

install() {
  if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
    return 0
  fi
  mkdir -p "$cache"
  # One installer at a time (test binaries and CI may ask at once).
  exec 9>"$cache/.venv-moto.lock"
  flock 9
  if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
    return 0
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "moto[server]==$MOTO_VERSION" >&2
  "$venv/bin/python" -c "import moto, moto.server; assert moto.__version__ == '$MOTO_VERSION', moto.__version__" >&2
  touch "$stamp"
  echo "moto: moto[server]==$MOTO_VERSION installed in $venv" >&2
}

case "${1:-}" in
  install) install ;;
  python) install; echo "$venv/bin/python" ;;
  *) echo "usage: scripts/moto.sh install|python" >&2; exit 2 ;;
esac
