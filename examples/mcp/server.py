"""A notes MCP server that accepts Tessera access tokens — and knows nothing of Tessera.

It is an OAuth 2.0 resource server as the MCP authorization spec describes one, built
only on the official MCP Python SDK (`mcp`), PyJWT and httpx:

- RFC 9728 protected-resource metadata at /.well-known/oauth-protected-resource/mcp
  names this server's URL as the resource and the authorization server (Tessera's
  issuer) that issues its tokens;
- a request without a valid token is answered 401 with
  `WWW-Authenticate: Bearer ... resource_metadata="..."`;
- tokens are checked with PyJWT against the JWKS that the authorization server's
  RFC 8414 metadata names: signature (EdDSA), `typ` at+jwt, `iss`, `aud` (this server's
  URL, exactly), `exp`; a DPoP-bound token (`cnf`) presented as a bearer token is refused;
- then (unless --no-introspection) RFC 7662 introspection with this server's own client
  credential tells whether the token is still active, so a token from an ended run is
  refused at once, before its `exp`; introspection that fails or answers anything but a
  JSON object refuses the token too (401: fail closed);
- each tool needs its scope: a `tools/call` whose token lacks it is answered 403
  `insufficient_scope` naming the scope (MCP step-up authorization), and the tool checks
  again itself. A body the check cannot read is refused, never passed on unchecked:
  over 1 MiB is 413, JSON nested too deep to parse is 400 (JSON-RPC parse error).

    python examples/mcp/server.py --port 8931 --issuer http://127.0.0.1:8700
    # introspection credential: --client-id (default "notes") and the secret in
    # NOTES_INTROSPECTION_SECRET (or --client-secret-file)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlsplit

import anyio
import httpx
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("notes-server")

# The scope each tool needs. Tessera issues one scope per token, so the scopes are the
# server's whole vocabulary: `scopes_supported` in the metadata is exactly this set.
TOOL_SCOPES = {"list_notes": "notes:read", "add_note": "notes:write"}
SCOPES = sorted(set(TOOL_SCOPES.values()))
# The most the scope check buffers of a POST. The transport takes larger bodies, so a
# larger one is refused (413) here: passed on, it would reach the tools unchecked.
MAX_BODY = 1 << 20


class DiscoveryError(RuntimeError):
    pass


class RefusedToken(Exception):
    """A token that is not accepted, and why (logged; the client only sees 401)."""


def well_known_url(issuer: str, suffix: str) -> str:
    """RFC 8414 §3.1: the well-known segment goes between the host and the issuer's path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/{suffix}{path}"


@dataclass
class AuthorizationServer:
    """What the server learned from the authorization server's RFC 8414 metadata."""

    issuer: str
    metadata: dict[str, Any]
    jwks: jwt.PyJWKClient

    @property
    def jwks_uri(self) -> str:
        return self.metadata["jwks_uri"]

    @property
    def introspection_endpoint(self) -> str | None:
        return self.metadata.get("introspection_endpoint")


def discover(issuer: str, timeout: float = 10.0) -> AuthorizationServer:
    """Fetch and check the RFC 8414 metadata; retried for up to `timeout` seconds."""
    url = well_known_url(issuer, "oauth-authorization-server")
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=5.0)
            response.raise_for_status()
            metadata = response.json()
            break
        except (httpx.HTTPError, ValueError) as e:
            if time.monotonic() >= deadline:
                raise DiscoveryError(f"authorization server metadata at {url}: {e}") from e
            time.sleep(0.2)
    # RFC 8414 §3.3: the metadata's issuer is the one asked for, exactly.
    if metadata.get("issuer") != issuer:
        raise DiscoveryError(f"{url} names issuer {metadata.get('issuer')!r}, not {issuer!r}")
    if not isinstance(metadata.get("jwks_uri"), str):
        raise DiscoveryError(f"{url} names no jwks_uri")
    return AuthorizationServer(
        issuer=issuer,
        metadata=metadata,
        jwks=jwt.PyJWKClient(metadata["jwks_uri"], cache_keys=True, lifespan=300, timeout=5),
    )


@dataclass
class JwtIntrospectionVerifier:
    """An MCP `TokenVerifier`: RFC 9068 JWT checks with PyJWT, then RFC 7662 introspection."""

    server: AuthorizationServer
    resource: str
    client_id: str | None = None
    client_secret: str | None = None
    introspect: bool = True
    leeway: float = 0.0
    _http: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=5.0))

    def __post_init__(self) -> None:
        if self.introspect and not (self.server.introspection_endpoint and self.client_id and self.client_secret):
            raise ValueError(
                "introspection needs the authorization server's introspection_endpoint, a client id "
                "and a client secret (or turn it off with --no-introspection)"
            )

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await self._check_jwt(token)
            if self.introspect:
                await self._check_active(token)
        except (jwt.PyJWTError, RefusedToken) as e:
            log.warning("token refused: %s", e)
            return None
        except (httpx.HTTPError, ValueError) as e:
            # Fail closed: a token whose state cannot be learned is not accepted.
            log.warning("token refused: introspection failed: %s", e)
            return None
        scopes = claims.get("scope", "")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=scopes.split() if isinstance(scopes, str) else [],
            expires_at=int(claims["exp"]),
            resource=self.resource,
            subject=str(claims["sub"]),
            claims={k: claims[k] for k in ("iss", "act", "run", "task", "jti") if k in claims},
        )

    async def _check_jwt(self, token: str) -> dict[str, Any]:
        header = jwt.get_unverified_header(token)
        # RFC 9068 §4: the type is at+jwt (or application/at+jwt); an ID token, a DPoP proof
        # or any other JWT signed by the same key is not an access token.
        if str(header.get("typ", "")).lower() not in ("at+jwt", "application/at+jwt"):
            raise RefusedToken(f"typ {header.get('typ')!r} is not at+jwt")
        # PyJWKClient fetches with urllib: off the event loop.
        key = await anyio.to_thread.run_sync(self.server.jwks.get_signing_key_from_jwt, token)
        claims = jwt.decode(
            token,
            key=key.key,
            algorithms=["EdDSA"],
            audience=self.resource,
            issuer=self.server.issuer,
            leeway=self.leeway,
            options={"require": ["exp", "iat", "iss", "aud", "sub", "jti", "scope"], "strict_aud": True},
        )
        # RFC 9449 §7.1: a DPoP-bound token is presented with a proof of its key; this server
        # takes bearer tokens only, so a bound token here is refused rather than downgraded.
        if "cnf" in claims:
            raise RefusedToken("the token is DPoP-bound (cnf) but was presented as a bearer token")
        return claims

    async def _check_active(self, token: str) -> None:
        response = await self._http.post(
            self.server.introspection_endpoint,
            data={"token": token, "token_type_hint": "access_token"},
            auth=basic_credentials(self.client_id, self.client_secret),
            headers={"Accept": "application/json"},
        )
        response.raise_for_status()
        body = response.json()
        # RFC 7662 §2.2: a JSON object. Anything else says nothing: refused (fail closed).
        if not isinstance(body, dict):
            raise RefusedToken(f"introspection answered a JSON {type(body).__name__}, not an object")
        if body.get("active") is not True:
            raise RefusedToken("inactive at introspection (the run ended or the token was revoked)")
        # Introspection answers for this resource's tokens only; check it said so.
        aud = body.get("aud")
        if self.resource not in (aud if isinstance(aud, list) else [aud]):
            raise RefusedToken(f"introspection gives aud {aud!r}")


def basic_credentials(client_id: str | None, secret: str | None) -> tuple[str, str]:
    """RFC 6749 §2.3.1: id and secret are form-urlencoded before they go into HTTP Basic."""
    return quote_plus(client_id or "", safe=""), quote_plus(secret or "", safe="")


class ToolScopeMiddleware:
    """403 insufficient_scope for a `tools/call` whose token lacks the tool's scope.

    Runs inside the SDK's authentication middleware (it reads the authenticated user it
    left in the ASGI scope), on POSTs to the MCP endpoint only. The body is buffered, read
    as JSON-RPC (a single message or a batch), and replayed to the transport unchanged.
    """

    def __init__(self, app: ASGIApp, *, path: str, resource_metadata_url: str) -> None:
        self.app = app
        self.path = path
        self.resource_metadata_url = resource_metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        if not isinstance(user, AuthenticatedUser):
            await self.app(scope, receive, send)  # the SDK answers 401
            return
        # A body the check cannot read whole is refused, never passed on unchecked.
        if declared_length(scope) > MAX_BODY:
            await self.refuse(send, 413, None, -32600, f"the request body is over {MAX_BODY} bytes")
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > MAX_BODY:
                await self.refuse(send, 413, None, -32600, f"the request body is over {MAX_BODY} bytes")
                return
            if not message.get("more_body", False):
                break
        try:
            missing, request_id = missing_scope(b"".join(m.get("body", b"") for m in messages), set(user.scopes))
        except UnreadableBody as e:
            log.warning("request refused: %s", e)
            await self.refuse(send, 400, None, -32700, f"Parse error: {e}")
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        if missing is None:
            await self.app(scope, replay, send)
            return
        log.warning("tools/call refused: the token lacks scope %s", missing)
        description = f"this tool needs scope {missing}"
        # The challenge is the header (RFC 6750 §3.1); the body is a JSON-RPC error, which
        # MCP clients show as the call's error instead of a bare HTTP status.
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {
                    "code": -32600,
                    "message": f"insufficient_scope: {description}",
                    "data": {"error": "insufficient_scope", "scope": missing},
                },
            }
        ).encode()
        challenge = (
            f'Bearer error="insufficient_scope", scope="{missing}", '
            f'resource_metadata="{self.resource_metadata_url}", error_description="{description}"'
        )
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", challenge.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def refuse(send: Send, status: int, request_id: Any, code: int, message: str) -> None:
        """A JSON-RPC error with an HTTP status, for a body the scope check cannot take."""
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class UnreadableBody(ValueError):
    """JSON the scope check cannot read (nested too deep): refused, not passed on."""


def declared_length(scope: Scope) -> int:
    """The request's Content-Length (-1 without one; a chunked body is counted as read)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return MAX_BODY + 1  # not a length: refused with the oversized
    return -1


def missing_scope(body: bytes, scopes: set[str]) -> tuple[str | None, Any]:
    """The first scope a tools/call in `body` needs and `scopes` lacks (None if none), and its id.
    Raises UnreadableBody for JSON nested deeper than the parser goes."""
    try:
        parsed = json.loads(body)
    except RecursionError:
        raise UnreadableBody("the JSON is nested too deep") from None
    except ValueError:
        return None, None  # not JSON: the transport answers the parse error
    for message in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        needed = TOOL_SCOPES.get(name) if isinstance(name, str) else None
        if needed is not None and needed not in scopes:
            return needed, message.get("id")
    return None, None


def require_scope(scope: str) -> str:
    """The tool's own check (the middleware has refused already); returns the caller's `sub`."""
    token = get_access_token()
    if token is None or scope not in token.scopes:
        raise PermissionError(f"insufficient_scope: this tool needs scope {scope}")
    return token.subject or ""


def build_app(
    *,
    resource: str,
    server: AuthorizationServer,
    client_id: str | None,
    client_secret: str | None,
    introspect: bool = True,
) -> Any:
    """The Starlette app: the MCP endpoint at the resource URL's path, and its metadata."""
    path = urlsplit(resource).path or "/"
    verifier = JwtIntrospectionVerifier(
        server=server,
        resource=resource,
        client_id=client_id,
        client_secret=client_secret,
        introspect=introspect,
    )
    mcp = MCPServer(
        name="notes",
        instructions="A shared notebook: list_notes needs notes:read, add_note needs notes:write.",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=server.issuer,
            resource_server_url=resource,
            # The verifier compares `aud` with the resource exactly; the SDK checks it again.
            validate_token_resource=True,
            # No scope for every request: each tool asks for its own (one scope per token).
            required_scopes=None,
        ),
    )
    notes: list[dict[str, str]] = []

    @mcp.tool()
    def list_notes() -> list[dict[str, str]]:
        """All notes, oldest first (scope notes:read)."""
        require_scope(TOOL_SCOPES["list_notes"])
        return list(notes)

    @mcp.tool()
    def add_note(text: str) -> dict[str, str]:
        """Add a note (scope notes:write)."""
        author = require_scope(TOOL_SCOPES["add_note"])
        note = {"author": author, "text": text}
        notes.append(note)
        return note

    app = mcp.streamable_http_app(streamable_http_path=path, host=urlsplit(resource).hostname or "127.0.0.1")
    # The SDK's RFC 9728 document lists `required_scopes` as scopes_supported, and this
    # server has none required of every request: serve it with the tools' scopes instead.
    metadata_url = str(build_resource_metadata_url(resource))  # type: ignore[arg-type]
    metadata_path = urlsplit(metadata_url).path
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != metadata_path]
    routes: list[Route] = create_protected_resource_routes(
        resource_url=resource,  # type: ignore[arg-type]
        authorization_servers=[server.issuer],  # type: ignore[list-item]
        scopes_supported=SCOPES,
        resource_name="Notes (Tessera MCP example)",
    )
    app.router.routes[:0] = routes
    # Innermost: after the SDK's authentication, so the token's scopes are known.
    app.user_middleware.append(Middleware(ToolScopeMiddleware, path=path, resource_metadata_url=metadata_url))
    return app


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("NOTES_HOST", "127.0.0.1"), help="loopback address to listen on")
    p.add_argument("--port", type=int, default=int(os.environ.get("NOTES_PORT", "8931")))
    p.add_argument(
        "--resource",
        default=os.environ.get("NOTES_RESOURCE"),
        help="this server's URL, the tokens' audience (default http://HOST:PORT/mcp)",
    )
    p.add_argument(
        "--issuer",
        default=os.environ.get("TESSERA_OAUTH_ISSUER", "http://127.0.0.1:8700"),
        help="the authorization server's issuer URL (Tessera's [oauth] issuer)",
    )
    p.add_argument(
        "--client-id",
        default=os.environ.get("NOTES_CLIENT_ID", "notes"),
        help="introspection client id (Tessera: the backend's name)",
    )
    p.add_argument(
        "--client-secret-env",
        default="NOTES_INTROSPECTION_SECRET",
        help="environment variable holding the introspection secret",
    )
    p.add_argument("--client-secret-file", help="file holding the introspection secret (instead of the environment)")
    p.add_argument(
        "--no-introspection",
        action="store_true",
        default=os.environ.get("NOTES_INTROSPECTION", "1") == "0",
        help="check the JWT only: a token then stays good until its exp, even after its run ends",
    )
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per introspection otherwise
    if not is_loopback(args.host):
        p.error("this example listens on loopback only (plain HTTP)")
    resource = args.resource or f"http://{args.host}:{args.port}/mcp"
    secret = None
    if args.client_secret_file:
        with open(args.client_secret_file) as f:
            secret = f.read().strip()
    else:
        secret = os.environ.get(args.client_secret_env) or None
    introspect = not args.no_introspection
    if introspect and not secret:
        p.error(f"introspection needs the client secret: set {args.client_secret_env} (or --no-introspection)")

    try:
        server = discover(args.issuer)
    except DiscoveryError as e:
        print(f"notes server: {e}", file=sys.stderr)
        return 1
    # One line a person (or the example's test) can compare with Tessera's own metadata.
    print(
        "authorization server: "
        + json.dumps(
            {
                "issuer": server.issuer,
                "jwks_uri": server.jwks_uri,
                "introspection_endpoint": server.introspection_endpoint if introspect else None,
            }
        ),
        flush=True,
    )
    app = build_app(
        resource=resource,
        server=server,
        client_id=args.client_id,
        client_secret=secret,
        introspect=introspect,
    )
    print(f"notes MCP server: {resource} (metadata {build_resource_metadata_url(resource)})", flush=True)  # type: ignore[arg-type]
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower())
    return 0


if __name__ == "__main__":
    sys.exit(main())
