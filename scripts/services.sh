#!/usr/bin/env bash
# Makes sure the services the test suite talks to are running on loopback:
# PostgreSQL on 127.0.0.1:5432 (trust auth). Starts it with the machine's own
# service command when it is stopped; exits non-zero when it cannot be reached,
# so tests never silently skip.
set -euo pipefail

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }

if ! command -v pg_isready >/dev/null 2>&1; then
  echo "services: PostgreSQL client tools are not installed (apt-get install postgresql)" >&2
  exit 1
fi
if ! pg_up; then
  echo "services: starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if ! pg_up; then
  echo "services: PostgreSQL is not reachable on 127.0.0.1:5432" >&2
  exit 1
fi
echo "services: PostgreSQL ready on 127.0.0.1:5432"
