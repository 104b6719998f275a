"""An agent's tool calls an OAuth-protected MCP server with a token from Tessera.

The agent holds a run token (TESSERA_RUN_TOKEN_FILE) and nothing else. For one tool call:

1. it reads the MCP server's RFC 9728 protected-resource metadata and checks that the
   server names Tessera's issuer among its authorization servers (the run token is only
   ever sent to Tessera, at TESSERA_ADDR, never to an address the MCP server gives);
2. with Tessera's Python SDK (`tessera.Tool().access_token`), it exchanges the run token
   at Tessera's token endpoint (RFC 8693, RFC 8707 `resource` = the server's URL, one
   `scope`) for a short-lived access token, which Tessera's policy decides like any
   capability request;
3. it calls the tool with the official MCP client over streamable HTTP, the token in the
   Authorization header, and prints the result.

    TESSERA_ADDR=http://127.0.0.1:8700 TESSERA_RUN_TOKEN_FILE=run.token \
        python examples/mcp/agent.py --url http://127.0.0.1:8931/mcp list_notes
    ... add_note --arg text='hello'            # scope notes:write by default for add_note
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import tessera
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

# The scope the example server asks for each tool (its metadata lists them all).
DEFAULT_SCOPES = {"list_notes": "notes:read", "add_note": "notes:write"}


class AgentError(Exception):
    """A refusal or failure the agent reports (and exits non-zero on)."""


def well_known_url(url: str, suffix: str) -> str:
    """RFC 8414 §3.1 / RFC 9728 §3.1: /.well-known/SUFFIX inserted before the URL's path."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/{suffix}{path}"


def protected_resource_metadata(server_url: str) -> dict[str, Any]:
    """The MCP server's RFC 9728 metadata; its `resource` must be the URL we call (§3.3)."""
    response = httpx.get(well_known_url(server_url, "oauth-protected-resource"), timeout=10.0)
    response.raise_for_status()
    metadata = response.json()
    if metadata.get("resource") != server_url:
        raise AgentError(f"the server's metadata is for resource {metadata.get('resource')!r}, not {server_url!r}")
    return metadata


def get_access_token(server_url: str, scope: str, *, tool: tessera.Tool | None = None) -> str:
    """An access token for the MCP server at `server_url` with `scope`, from Tessera.

    `tool` is the Tessera SDK's client of the run (default: `tessera.Tool()`, which reads
    TESSERA_ADDR and the run token from TESSERA_RUN_TOKEN_FILE).
    """
    prm = protected_resource_metadata(server_url)
    own = tool is None
    tool = tool or tessera.Tool()
    try:
        issuer = tool.oauth_metadata()["issuer"]
        if issuer not in prm.get("authorization_servers", []):
            raise AgentError(
                f"{server_url} takes tokens from {prm.get('authorization_servers')}, not from Tessera "
                f"({issuer}); the run token is not sent anywhere else"
            )
        if scope not in prm.get("scopes_supported", [scope]):
            raise AgentError(f"{server_url} does not list scope {scope!r} ({prm.get('scopes_supported')})")
        # RFC 8693 token exchange at Tessera's /oauth/token: the run token for a token
        # whose `aud` is the server's URL (RFC 8707 resource), decided by Tessera's policy.
        # A bearer token: this server does not take DPoP proofs.
        return tool.access_token(prm["resource"], scope, dpop=False).token.reveal()
    finally:
        if own:
            tool.close()


@dataclass
class Refused(AgentError):
    """The MCP server refused the token: its status and WWW-Authenticate challenge."""

    status: int
    challenge: str

    def __str__(self) -> str:
        return f"the MCP server refused the call: {self.status} {self.challenge}"


async def call_tool(server_url: str, access_token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """Call `tool` with the official MCP client; the token rides in the Authorization header.

    A 401 or 403 from the server (bad, expired or revoked token; missing scope) raises
    `Refused` with the server's challenge, which the MCP client itself only reports as a
    failed request.
    """
    refusals: list[Refused] = []

    async def note_refusal(response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            refusals.append(Refused(response.status_code, response.headers.get("www-authenticate", "")))

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [note_refusal]},
    )
    try:
        async with http, Client(streamable_http_client(server_url, http_client=http)) as client:
            return await client.call_tool(tool, arguments)
    except Exception as e:  # the MCP client raises its error inside exception groups
        if refusals:
            raise refusals[0] from e
        raise AgentError(f"the tool call failed: {first_leaf(e)}") from e


def first_leaf(e: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while inner := getattr(e, "exceptions", None):
        e = inner[0]
    return e


def result_json(result: Any) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tool", nargs="?", default="list_notes")
    p.add_argument("--url", default=os.environ.get("NOTES_URL", "http://127.0.0.1:8931/mcp"), help="the MCP server")
    p.add_argument("--scope", help="scope to ask for (default: the tool's, e.g. notes:read for list_notes)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", help="a tool argument (repeatable)")
    args = p.parse_args(argv)
    scope = args.scope or DEFAULT_SCOPES.get(args.tool)
    if not scope:
        p.error(f"no default scope for tool {args.tool!r}: pass --scope")
    arguments = {}
    for item in args.arg:
        name, sep, value = item.partition("=")
        if not sep:
            p.error(f"--arg {item!r}: expected NAME=VALUE")
        arguments[name] = value
    try:
        token = get_access_token(args.url, scope)
        result = asyncio.run(call_tool(args.url, token, args.tool, arguments))
    except (AgentError, tessera.TesseraError, httpx.HTTPError) as e:
        print(f"agent: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result_json(result), indent=2))
    return 1 if getattr(result, "is_error", False) else 0


if __name__ == "__main__":
    sys.exit(main())
