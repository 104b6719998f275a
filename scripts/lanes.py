#!/usr/bin/env python3
"""Runs the test suite's lanes side by side, each as soon as what it needs is built.

Usage: scripts/lanes.py TIER LOG_DIR TOOLS_COMMAND -- CARGO_ARGS...   (scripts/test.sh calls it)

Why: the suite mostly waits (on brokers starting, databases, revocation
deadlines) while the compiler mostly computes, so a lane starts the moment
cargo reports the binaries it needs, while the rest still compiles. cargo's
`--message-format=json` names each artefact as it is finished. The test
binaries are run directly, as `cargo test` would run them (from their
package's folder): cargo holds the build directory's lock while its own tests
run, so lanes of `cargo test` would take turns. Each lane's output is kept
whole in its own log and printed when the lane ends; every lane runs whatever
another's outcome, and the suite fails if any lane failed.

The test tools (moto, PostgreSQL 17, schemathesis, the console's and the
Python SDK's environments) are installed by TOOLS_COMMAND while cargo
compiles: the lanes that use them ("tools") wait for it. With
TESSERA_TEST_CLIPPY=1 (CI), `cargo clippy --all-targets -D warnings` is a lane
too, once the build is done: its compile overlaps the tests' waiting.
"""

import json
import os
import subprocess
import sys
import time

TIER, LOGS, TOOLS = sys.argv[1], sys.argv[2], sys.argv[3]
CARGO_ARGS = sys.argv[sys.argv.index("--") + 1 :]
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
BIN = os.path.join(TARGET, "debug", "tessera")

# A lane: its name, what it needs built ("KIND:NAME" of a test binary, "bin"
# for the tessera binary, "all" for the whole build, "tools" for the tools),
# and its steps. A step is ("test", "KIND:NAME", args) — a test binary — or a
# command.
#
# Niceness: the private clusters' lane is the longest (ten thousand users
# issued and removed on PostgreSQL 17) and mostly one PostgreSQL backend's
# CPU, so it runs at the default priority and everything else (the build,
# the other lanes) a step below it, clippy two: the other lanes have minutes
# to spare, it has none.
NICE = {"clusters": 0, "clippy": 10}
DEFAULT_NICE = 5
FULL = [
    ("api", ["test:api", "tools"], [("test", "test:api", [])]),
    ("clusters", ["test:clusters", "tools"], [("test", "test:clusters", [])]),
    (
        "unit",
        ["lib:tessera_broker", "bin:tessera", "lib:tessera_client"],
        [
            ("test", "lib:tessera_broker", []),
            ("test", "bin:tessera", []),
            ("test", "lib:tessera_client", []),
        ],
    ),
    # Doc tests are compiled and run by rustdoc: through cargo, once the build
    # is done and its lock free.
    ("doc", ["all"], [["cargo", "test", "--locked", "--workspace", "--doc"]]),
    (
        "binaries",
        ["test:cli", "test:first_day", "test:policy_cli"],
        [
            ("test", "test:cli", []),
            ("test", "test:first_day", []),
            ("test", "test:policy_cli", []),
        ],
    ),
    ("policies", ["bin"], [[BIN, "policy", "check", "policy"], [BIN, "policy", "test", "policy"]]),
    ("schemathesis", ["bin", "tools"], [["scripts/schemathesis.sh", "run", BIN]]),
    ("console", ["bin", "tools"], [["scripts/console-test.sh", "run", BIN]]),
    ("python", ["bin", "tools"], [["scripts/python.sh", "run", BIN]]),
]
if os.environ.get("TESSERA_TEST_CLIPPY") == "1":
    FULL.append(
        (
            "clippy",
            ["all"],
            [["cargo", "clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]],
        )
    )
FAST = [
    ("unit", ["lib:tessera_broker"], [("test", "lib:tessera_broker", [])]),
    ("bin", ["bin:tessera"], [("test", "bin:tessera", [])]),
    # The API tests against SQLite: every `both_stores!` test's SQLite half
    # and every test named for SQLite.
    ("api-sqlite", ["test:api"], [("test", "test:api", ["sqlite"])]),
    # The CLI's basics: its errors, the admin commands, the first run.
    ("cli", ["test:cli"], [("test", "test:cli", ["errors::", "admin::", "first_run::"])]),
    ("policies", ["bin"], [[BIN, "policy", "check", "policy"], [BIN, "policy", "test", "policy"]]),
]
LANES = FULL if TIER == "full" else FAST

built = {}  # "KIND:NAME" -> (package dir, executable); "bin" -> the tessera binary
running = {}  # name -> (Popen, started, log file)
pending = list(LANES)
failed = []
started_at = time.monotonic()


def lane_script(steps):
    """The lane as one shell script: its steps in order, the first failure ends it."""
    lines = ["set -e"]
    for step in steps:
        if isinstance(step, tuple):
            _, key, args = step
            pkg, exe = built[key]
            cmd = " ".join(map(shq, [exe, *args]))
            lines.append(f"echo {shq('== ' + key + ': ' + exe + ' ' + ' '.join(args))}")
            lines.append(f"(cd {shq(pkg)} && CARGO_MANIFEST_DIR={shq(pkg)} {cmd})")
        else:
            lines.append(" ".join(map(shq, step)))
    return "\n".join(lines)


def shq(s):
    return "'" + str(s).replace("'", "'\\''") + "'"


def start_ready(build_done):
    for lane in list(pending):
        name, needs, steps = lane
        if all((n == "all" and build_done) or n in built for n in needs):
            pending.remove(lane)
            log = open(os.path.join(LOGS, name + ".log"), "w")
            nice = str(NICE.get(name, DEFAULT_NICE))
            proc = subprocess.Popen(
                ["nice", "-n", nice, "bash", "-c", lane_script(steps)], stdout=log, stderr=subprocess.STDOUT
            )
            running[name] = (proc, time.monotonic(), log)
            print(f"== lane {name}: started at {time.monotonic() - started_at:.0f}s", flush=True)


def report(name, rc):
    proc, started, log = running.pop(name)
    log.close()
    took = time.monotonic() - started
    print(f"== lane {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f}s", flush=True)
    with open(os.path.join(LOGS, name + ".log")) as f:
        sys.stdout.write(f.read())
    print(f"== end of lane {name}", flush=True)
    if rc != 0:
        failed.append(name)


def reap():
    for name, (proc, _, _) in list(running.items()):
        rc = proc.poll()
        if rc is not None:
            report(name, rc)


print("== building the tests (and installing the test tools meanwhile)", flush=True)
tools_log = open(os.path.join(LOGS, "tools.log"), "w")
tools = subprocess.Popen(
    ["nice", "-n", str(DEFAULT_NICE), "bash", "-c", TOOLS], stdout=tools_log, stderr=subprocess.STDOUT
)


def check_tools():
    """Marks the tools ready once their install ended well; fails the suite if not."""
    if "tools" in built or tools.poll() is None:
        return
    tools_log.close()
    with open(os.path.join(LOGS, "tools.log")) as f:
        sys.stdout.write(f.read())
    if tools.returncode != 0:
        print("== installing the test tools failed", file=sys.stderr, flush=True)
        for proc, _, _ in running.values():
            proc.terminate()
        cargo.terminate()
        sys.exit(1)
    built["tools"] = None
    print(f"== test tools installed at {time.monotonic() - started_at:.0f}s", flush=True)


cargo = subprocess.Popen(
    ["nice", "-n", str(DEFAULT_NICE), "cargo", "test", "--locked", *CARGO_ARGS, "--no-run", "--message-format=json-render-diagnostics"],
    stdout=subprocess.PIPE,
    text=True,
)
for line in cargo.stdout:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    pkg = os.path.dirname(m["manifest_path"])
    if m["profile"]["test"]:
        built[f"{t['kind'][0]}:{t['name']}"] = (pkg, m["executable"])
    elif t["name"] == "tessera" and "bin" in t["kind"]:
        built["bin"] = (pkg, m["executable"])
    check_tools()
    start_ready(build_done=False)
    reap()
if cargo.wait() != 0:
    print("== the build failed", file=sys.stderr)
    for proc, _, _ in running.values():
        proc.terminate()
    sys.exit(1)
print(f"== built in {time.monotonic() - started_at:.0f}s", flush=True)
while pending or running:
    check_tools()
    start_ready(build_done=True)
    if pending and "tools" in built:
        break  # everything is built and installed: what is left never starts
    reap()
    time.sleep(0.2)
if pending:
    print(f"== lanes that could not start: {[l[0] for l in pending]}", file=sys.stderr)
    sys.exit(1)
if failed:
    print(f"== failed lanes: {' '.join(failed)} (logs in {LOGS})", file=sys.stderr)
    sys.exit(1)
