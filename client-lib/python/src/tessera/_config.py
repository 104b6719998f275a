"""Where the broker is, how to reach it, and where the credentials come from.

The rules are the Rust client's (client-lib/src/client.rs), so a tool behaves
the same whichever SDK it uses:

* ``TESSERA_ADDR`` is a URL or ``host:port`` (read as ``http://host:port``).
* A bearer secret goes in clear (``http://``) only to loopback, unless
  ``TESSERA_INSECURE_HTTP=1``; ``http://`` with a CA configured is a mistake.
* Proxies named by ``HTTP(S)_PROXY``/``ALL_PROXY`` are ignored unless
  ``TESSERA_USE_PROXY=1``: a proxy would see the token. Redirects are never
  followed: one would re-send the token (or a capability) elsewhere.
* The run token comes from ``TESSERA_RUN_TOKEN_FILE`` (refused when group or
  others may read it) or ``TESSERA_RUN_TOKEN_FD`` (read, then closed);
  ``TESSERA_RUN_TOKEN`` only with ``TESSERA_ALLOW_TOKEN_ENV=1``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import ssl
import stat
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Mapping

from ._secret import Secret
from .errors import ConfigError

log = logging.getLogger("tessera")

RUN_TOKEN_PREFIX = "tsr_run_"
RUNTIME_KEY_PREFIX = "tsr_rt_"


@dataclass(frozen=True)
class RetryPolicy:
    """How requests are retried, with jittered exponential backoff within a time
    budget: a 429 (honouring ``Retry-After``), a connection that could not be had,
    a 503 after which nothing was done (``store_unavailable``, ``backend_throttled``);
    and for idempotent calls only (GETs, ending a run, revoking…) any 503, a timeout
    or a broken connection too. A request that may have taken effect is not sent
    twice when that could issue twice; a decision (400, 401, 403, 404, 409…) never
    is retried."""

    max_retries: int = 4
    base: float = 0.2
    max_backoff: float = 5.0
    budget: float = 30.0

    @classmethod
    def none(cls) -> "RetryPolicy":
        return cls(max_retries=0)

    def backoff(self, retry: int) -> float:
        nominal = min(self.base * (2 ** min(retry, 16)), self.max_backoff)
        # Jitter in [50 %, 150 %) so many clients do not retry in step.
        return float(nominal * (0.5 + random.random()))


class Environment(dict):  # type: ignore[type-arg]
    """The environment (or the ``env=`` mapping) as read: it may hold
    ``TESSERA_RUNTIME_KEY`` or ``TESSERA_RUN_TOKEN``, so its ``repr`` (what a crash
    reporter shows of a frame's locals) names the variables, not their values."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<environment: {len(self)} variables, values redacted>"

    __str__ = __repr__


def env_lookup(env: Mapping[str, str] | None = None) -> Environment:
    source = os.environ if env is None else env
    return Environment((k, v) for k, v in source.items() if v != "")


def broker_address(text: str) -> str:
    """``host:port`` is ``http://host:port``; a trailing ``/`` is dropped."""
    text = text.strip().rstrip("/")
    return text if "://" in text else f"http://{text}"


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def check_proxy(proxy: str, base: str, insecure_http: bool, what: str = "the run token") -> None:
    """A proxy (``TESSERA_USE_PROXY=1``) follows the broker's rule for the hop to it.

    To an ``http://`` broker the request, token and all, goes to the proxy as it is:
    the proxy must be reached over TLS (``https://``) or on this machine, unless
    ``TESSERA_INSECURE_HTTP=1``. To an ``https://`` broker the proxy carries a TLS
    tunnel (``CONNECT``) and sees no token, whatever its own scheme."""
    if urllib.parse.urlsplit(base).scheme == "https":
        return
    url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    host = url.hostname or ""
    if url.scheme == "https" or (url.scheme == "http" and is_loopback_host(host)):
        return
    if insecure_http:
        log.warning(
            "sending %s in clear through the %s proxy at %s (TESSERA_USE_PROXY=1, TESSERA_INSECURE_HTTP=1)",
            what,
            url.scheme,
            host,
        )
        return
    raise ConfigError(
        f"refusing to send {what} in clear through the {url.scheme} proxy at {host} (TESSERA_USE_PROXY=1, "
        "the broker address is http://): use an https:// proxy or one on this machine, an https:// "
        "broker, or set TESSERA_INSECURE_HTTP=1 to accept that anyone on the path reads it"
    )


def check_transport(base: str, has_ca: bool, insecure_http: bool, what: str = "the run token") -> None:
    url = urllib.parse.urlsplit(base)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"broker address must start with http:// or https://, got {base!r}")
    if url.username or url.password:
        raise ConfigError("the broker address must not carry credentials")
    if url.scheme != "http":
        return
    if has_ca:
        raise ConfigError(
            "TESSERA_CA_FILE (a CA) is set but the broker address is http://: nothing would be "
            "verified; use https://"
        )
    if is_loopback_host(url.hostname):
        return
    if insecure_http:
        log.warning("sending %s in clear over http:// to %s (TESSERA_INSECURE_HTTP=1)", what, url.hostname)
        return
    raise ConfigError(
        f"refusing to send {what} in clear to {url.hostname}: use https://, or set "
        "TESSERA_INSECURE_HTTP=1 to accept that anyone on the path reads it"
    )


def check_token_shape(token: Secret, prefix: str, what: str) -> None:
    # The value is looked at in a frame of its own that has returned before anything
    # is raised: a traceback's locals never hold it.
    if not _token_shaped(token.reveal(), prefix):
        raise ConfigError(f"the {what} must be one {prefix}… value (is the file the {what}?)")


def _token_shaped(token: str, prefix: str) -> bool:
    return (
        token.startswith(prefix)
        and len(token) <= 256
        and not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token)
    )


def read_secret_file(path: str, what: str, fd_hint: str) -> Secret:
    """Reads a secret file, refusing a regular file that group or others may read.
    The mode is read from the opened file, not the path."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError(f"cannot read the {what} from {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
            raise ConfigError(
                f"the {what} file {path} has mode {st.st_mode & 0o777:o}: group or others can "
                f"read it; chmod 600 it{fd_hint}"
            )
        return Secret(_read_all(fd).strip())
    finally:
        os.close(fd)


def read_secret_fd(fd: int, what: str) -> Secret:
    """Reads a secret from an inherited descriptor, then closes it, whether or not
    the read worked: it was handed over for this."""
    if fd <= 2:
        raise ConfigError("TESSERA_RUN_TOKEN_FD must be a descriptor above 2")
    try:
        return Secret(_read_all(fd).strip())
    except OSError as e:
        raise ConfigError(f"cannot read the {what} from descriptor {fd}: {e.strerror}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_all(fd: int) -> str:
    # What was read is dropped before an error is raised (a traceback's locals).
    chunks = []
    size = 0
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        chunks.append(b)
        size += len(b)
        if size > 65536:
            del b, chunks
            raise ConfigError("the token file is too large to be a token")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        pass
    del b, chunks
    raise ConfigError("the token file is not text")


def run_token_from_env(env: Mapping[str, str]) -> Secret:
    if path := env.get("TESSERA_RUN_TOKEN_FILE"):
        return read_secret_file(path, "run token", " (or hand the token over a descriptor, TESSERA_RUN_TOKEN_FD)")
    if fd := env.get("TESSERA_RUN_TOKEN_FD"):
        try:
            n = int(fd)
        except ValueError:
            raise ConfigError("TESSERA_RUN_TOKEN_FD must be a number") from None
        return read_secret_fd(n, "run token")
    if env.get("TESSERA_RUN_TOKEN"):
        if env.get("TESSERA_ALLOW_TOKEN_ENV") != "1":
            raise ConfigError(
                "TESSERA_RUN_TOKEN is set but tokens in the environment leak to every child "
                "process; use TESSERA_RUN_TOKEN_FILE, or set TESSERA_ALLOW_TOKEN_ENV=1 to accept the risk"
            )
        log.warning("using the run token from TESSERA_RUN_TOKEN: every child process inherits it")
        return Secret(env["TESSERA_RUN_TOKEN"])
    raise ConfigError("no run token: set TESSERA_RUN_TOKEN_FILE (or TESSERA_RUN_TOKEN_FD)")


def runtime_key_from_env(env: Mapping[str, str]) -> Secret:
    if path := env.get("TESSERA_RUNTIME_KEY_FILE"):
        return read_secret_file(path, "runtime key", "")
    if env.get("TESSERA_RUNTIME_KEY"):
        return Secret(env["TESSERA_RUNTIME_KEY"])
    raise ConfigError("no runtime key: set TESSERA_RUNTIME_KEY_FILE (or TESSERA_RUNTIME_KEY)")


@dataclass(frozen=True, repr=False)
class Transport:
    """How one client reaches the broker (resolved settings)."""

    base: str
    insecure_http: bool
    ca_file: str | None
    proxy: str | None
    timeout: float
    connect_timeout: float
    retry: RetryPolicy

    def __repr__(self) -> str:
        proxy = "<redacted>" if self.proxy else None
        return f"Transport(base={self.base!r}, ca_file={self.ca_file!r}, proxy={proxy})"

    def ssl_context(self) -> ssl.SSLContext:
        if self.ca_file:
            try:
                return ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"cannot read TESSERA_CA_FILE {self.ca_file}: {e}") from None
        return ssl.create_default_context()


def transport(
    env: Mapping[str, str],
    addr: str | None,
    ca_file: str | None,
    timeout: float,
    connect_timeout: float,
    retry: RetryPolicy | None,
    insecure_http: bool | None,
    use_proxy: bool | None,
    what: str,
) -> Transport:
    addr = addr or env.get("TESSERA_ADDR")
    if not addr:
        raise ConfigError("no broker address: TESSERA_ADDR is not set")
    base = broker_address(addr)
    ca_file = ca_file or env.get("TESSERA_CA_FILE")
    if insecure_http is None:
        insecure_http = env.get("TESSERA_INSECURE_HTTP") == "1"
    if use_proxy is None:
        use_proxy = env.get("TESSERA_USE_PROXY") == "1"
    check_transport(base, ca_file is not None, insecure_http, what)
    proxy = None
    if use_proxy:
        host = urllib.parse.urlsplit(base).hostname or ""
        proxies = urllib.request.getproxies()
        scheme = urllib.parse.urlsplit(base).scheme
        if not urllib.request.proxy_bypass(host):
            proxy = proxies.get(scheme) or proxies.get("all")
        if proxy:
            check_proxy(proxy, base, insecure_http, what)
    return Transport(
        base=base,
        insecure_http=insecure_http,
        ca_file=ca_file,
        proxy=proxy,
        timeout=timeout,
        connect_timeout=connect_timeout,
        retry=retry or RetryPolicy(),
    )
