#!/usr/bin/env bash
# Bytes stored per issued capability on SQLite: runs the broker (`serve --dev`, the
# bench policy), issues capabilities with wrk for DURATION, stops the broker, then
# checkpoints the WAL and reports the database's size and each table's and index's
# share (SQLite's dbstat) divided by the number of capabilities issued. Before the
# broker stops, it copies the database and its WAL as they are under load and reports
# how many pages each commit wrote to the WAL, by table or index: what a commit costs
# in writes, since SQLite appends a whole page for every page a commit changes.
#
#   bench/bytes.sh                           # release build of this tree, 10 s
#   BIN=/tmp/other/tessera bench/bytes.sh    # another build
#
# Needs wrk, curl, jq and python3 (its sqlite3 module reads dbstat). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
RUNS=${RUNS:-64}
PORT=${PORT:-8702}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin tessera
  BIN="$TARGET/release/tessera"
fi

dir=$(mktemp -d)
trap '[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
TESSERA_LOG=warn TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" TESSERA_STORE_URL="sqlite://$dir/bytes.db" \
  "$BIN" serve --dev --config bench/tessera.toml --data-dir "$dir" --policy-dir bench/policy \
  --listen "127.0.0.1:$PORT" 2> "$dir/server.log" &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
key=$(TESSERA_ADDR="http://127.0.0.1:$PORT" TESSERA_ADMIN_TOKEN_FILE="$dir/admin.token" \
  "$BIN" runtimes create bench --users '*' --task-kinds '*' --json | jq -r .key)
: > "$dir/tokens"
for i in $(seq 1 "$RUNS"); do
  curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' \
    -d "{\"user\":\"alice\",\"task\":{\"id\":\"bytes-$i\",\"kind\":\"summarize\"},\"ttl\":\"2h\"}" \
    "http://127.0.0.1:$PORT/v1/runs" | jq -r .run_token >> "$dir/tokens"
done
TOKENS_FILE="$dir/tokens" wrk -t2 -c"$CONNS" -d"$DURATION" -s bench/capabilities.lua \
  "http://127.0.0.1:$PORT/v1/capabilities" > "$dir/wrk.txt"
# The WAL as the load left it (a broker that stops checkpoints and removes it). A
# diagnostic: the copy is not atomic, so a commit being written as it is taken may
# be counted in part.
mkdir "$dir/live"
cp "$dir/bytes.db" "$dir/bytes.db-wal" "$dir/live/"
kill "$pid"; wait "$pid" 2>/dev/null || true
pid=

python3 - "$dir/live/bytes.db" <<'PY'
import collections, sqlite3, struct, sys
path = sys.argv[1]
wal = open(path + "-wal", "rb").read()
page_size = struct.unpack(">I", wal[8:12])[0]
salt = wal[16:24]
# Frames since the WAL last restarted: a 24-byte header (page number, and the
# database size in pages on a commit's last frame) and the page; older frames
# carry another salt.
commits, frames, off = [], [], 32
while off + 24 + page_size <= len(wal) and wal[off + 8:off + 16] == salt:
    page, size_after = struct.unpack(">II", wal[off:off + 8])
    frames.append(page)
    if size_after:
        commits.append(frames)
        frames = []
    off += 24 + page_size
db = sqlite3.connect(path)
names = dict((p, n) for n, p in db.execute("SELECT name, pageno FROM dbstat"))
pages = collections.Counter(names.get(p, "?") for c in commits for p in c)
n = max(len(commits), 1)
print(f"WAL pages per commit, last {len(commits)} commits: {sum(pages.values()) / n:.2f}")
print("| table or index | WAL pages per commit |")
print("|---|---|")
for name, count in pages.most_common():
    if count / n >= 0.01:
        print(f"| {name} | {count / n:.2f} |")
PY

python3 - "$dir/bytes.db" <<'PY'
import os, sqlite3, sys
path = sys.argv[1]
db = sqlite3.connect(path)
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
caps = db.execute("SELECT COUNT(*) FROM capabilities").fetchone()[0]
audit = db.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
size = os.path.getsize(path)
print(f"capabilities issued: {caps}, audit rows: {audit}, database: {size} bytes")
print(f"bytes per capability (whole file): {size / max(caps, 1):.0f}")
print("| table or index | bytes | per capability |")
print("|---|---|---|")
rows = db.execute(
    "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY SUM(pgsize) DESC"
).fetchall()
for name, total in rows:
    if total >= 64 * 1024:
        print(f"| {name} | {total} | {total / max(caps, 1):.0f} |")
PY
