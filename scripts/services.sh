#!/usr/bin/env bash
# Makes sure the services the test suite talks to are running on loopback:
# PostgreSQL on 127.0.0.1:5432 (trust auth) and MariaDB on 127.0.0.1:3306 (root,
# no password). Starts each with the machine's own service command when it is
# stopped; exits non-zero when one cannot be reached, so tests never silently
# skip.
set -euo pipefail

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
maria_up() { mysqladmin --protocol=tcp -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1; }

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

if ! command -v mysqladmin >/dev/null 2>&1; then
  echo "services: MariaDB client tools are not installed (apt-get install mariadb-server)" >&2
  exit 1
fi
if ! maria_up; then
  echo "services: starting MariaDB"
  if [ -x /usr/sbin/mariadbd ]; then
    install -d -o mysql -g mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  fi
  for _ in $(seq 1 30); do maria_up && break; sleep 1; done
fi
if ! maria_up; then
  echo "services: MariaDB is not reachable on 127.0.0.1:3306" >&2
  exit 1
fi
# The database-backend tests grant on tables in database `test`.
mysql --protocol=tcp -h 127.0.0.1 -P 3306 -u root -e "CREATE DATABASE IF NOT EXISTS test"
echo "services: MariaDB ready on 127.0.0.1:3306"
