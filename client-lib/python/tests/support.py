"""A real Tessera broker (``$TESSERA_BIN serve --dev``) on 127.0.0.1, moto and
PostgreSQL for the SDK's tests. Loopback only: nothing here talks to any other
address. A service that cannot be started fails the tests; none is skipped."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[3]
POLICY = REPO / "policy"

# Policies of the SDK tests, added to a copy of the repository's policy folder.
SDK_POLICY = r"""
@id("sdk-test-aws-read-reports") @ttl("10m") @uses("5")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"s3:GetObject", resource)
when { resource.backend == "aws-main" && resource.path like "arn:aws:s3:::tessera-reports/reports/*" };

// Connections to 127.0.0.4 need a release manager's approval each.
@id("sdk-test-egress-gated")
@approval("group:release-managers")
@allow_addresses("127.0.0.0/8")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "127.0.0.4:*" };

@id("sdk-test-egress-loopback")
@allow_addresses("127.0.0.0/8")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"connect", resource)
when { resource.kind == "net" && resource.path like "127.0.0.1:*" };
"""

OAUTH_POLICY = r"""
@id("sdk-test-notes-read") @ttl("10m")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"notes:read", resource)
when { resource.kind == "oauth-resource" && resource.backend == "notes" };
"""

OAUTH_SCHEMA = """
  // Added by the Python SDK's tests when the shipped schema lacks them.
  action "notes:read", "notes:write"
    appliesTo { principal: [User], resource: [Resource], context: RequestContext };
"""


def bin_path() -> str:
    path = os.environ.get("TESSERA_BIN")
    if not path:
        raise RuntimeError("TESSERA_BIN is not set: run the tests with scripts/python.sh run TESSERA_BIN")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"TESSERA_BIN={path} is not an executable")
    return os.path.abspath(path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_secret(path: Path, value: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    os.chmod(path, 0o600)
    return path


def policy_copy(dest: Path, extra: str = "", oauth: bool = False) -> Path:
    shutil.copytree(POLICY, dest)
    if extra or oauth:
        (dest / "sdk-tests.cedar").write_text(extra + (OAUTH_POLICY if oauth else ""))
    if oauth:
        schema = dest / "schema.cedarschema"
        text = schema.read_text()
        if '"notes:read"' not in text:
            end = text.rstrip().rfind("}")
            text = text[:end] + OAUTH_SCHEMA + text[end:]
            schema.write_text(text)
    return dest


@dataclass
class Broker:
    dir: Path
    addr: str
    port: int
    proc: subprocess.Popen[bytes]
    gateway: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def admin_token_file(self) -> Path:
        return self.dir / "admin.token"

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [bin_path(), *args],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.dir),
                "TESSERA_ADDR": self.addr,
                "TESSERA_ADMIN_TOKEN_FILE": str(self.admin_token_file),
            },
            capture_output=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"tessera {' '.join(args)}: {out.returncode}\n{out.stderr.decode(errors='replace')}")
        return out.stdout.decode()

    def runtime_key(self, kinds: str = "summarize") -> str:
        name = f"rt-{secrets.token_hex(4)}"
        out = json.loads(self.cli("runtimes", "create", name, "--users", "*", "--task-kinds", kinds, "--json"))
        key = out["key"]
        assert key.startswith("tsr_rt_")
        return str(key)

    def log(self) -> str:
        try:
            return (self.dir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_broker(
    base: Path,
    config: Callable[[int], str],
    *,
    policy_extra: str = "",
    oauth: bool = False,
    env: dict[str, str] | None = None,
    gateway_port: int | None = None,
) -> Broker:
    base.mkdir(parents=True, exist_ok=True)
    port = free_port()
    data = base / "data"
    policy = policy_copy(base / "policy", policy_extra, oauth)
    cfg = base / "tessera.toml"
    cfg.write_text(config(port))
    broker_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base),
        "TESSERA_ADMIN_TOKEN_FILE": str(data / "admin.token"),
        "TESSERA_LOG": "debug,sqlx=warn",
    }
    broker_env.update(env or {})
    log = open(base / "broker.log", "ab")
    proc = subprocess.Popen(
        [
            bin_path(), "serve", "--dev",
            "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(data),
            "--policy-dir", str(policy),
            "--config", str(cfg),
        ],  # fmt: skip
        cwd=base,
        env=broker_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    broker = Broker(
        dir=data,
        addr=f"http://127.0.0.1:{port}",
        port=port,
        proc=proc,
        gateway=f"127.0.0.1:{gateway_port}" if gateway_port else None,
        env=broker_env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tessera serve --dev exited {proc.returncode}:\n{(base / 'broker.log').read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{broker.addr}/readyz", timeout=2) as r:
                if r.status == 200:
                    return broker
        except OSError:
            pass
        time.sleep(0.1)
    broker.stop()
    raise RuntimeError(f"tessera serve --dev did not become ready:\n{(base / 'broker.log').read_text()[-4000:]}")


# ------------------------------------------------------------------ moto


@dataclass
class Moto:
    endpoint: str
    broker_keys: dict[str, str]
    admin_keys: dict[str, str]
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def moto_python() -> str:
    if p := os.environ.get("TESSERA_MOTO_PYTHON"):
        return p
    out = subprocess.run(
        ["bash", str(REPO / "scripts/moto.sh"), "python"], stdout=subprocess.PIPE, stderr=sys.stderr, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError("scripts/moto.sh python failed: moto is required for the AWS tests")
    return out.stdout.decode().strip()


def start_moto(log_path: Path) -> Moto:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [moto_python(), str(REPO / "tests/moto/launcher.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(log_path.parent)},
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        info = json.loads(line)
    except ValueError:
        proc.kill()
        raise RuntimeError(f"moto launcher did not start:\n{log_path.read_text(errors='replace')[-4000:]}") from None
    return Moto(
        endpoint=f"http://127.0.0.1:{info['port']}",
        broker_keys=info["users"]["tessera-broker"],
        admin_keys=info["users"]["tessera-admin"],
        proc=proc,
    )


# ------------------------------------------------------------------ a local HTTP server


class Recorder:
    """A plain HTTP server on 127.0.0.1 that records what it received and answers
    with what ``respond`` says (status, headers, body)."""

    def __init__(
        self,
        respond: Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]],
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self._handle()

            def do_POST(self) -> None:  # noqa: N802
                self._handle()

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                recorder.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
                )
                status, headers, out = respond(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
