"""Tessera's Python SDK: runs for agent runtimes, capabilities and credentials
for tools, OAuth token exchange with DPoP.

Runtime side::

    import tessera
    with tessera.run(user="alice", task={"id": "t-1", "kind": "summarize"}, ttl="30m") as run:
        tool = run.tool()
        cap = tool.capability("read", "svc-reports:reports/2026/q1.csv")
        cred = tool.exchange(cap)

Tool side (in the sandbox): ``tessera.Tool()`` reads ``TESSERA_ADDR`` and
``TESSERA_RUN_TOKEN_FILE``. Every secret is a :class:`Secret`; no ``repr`` shows one.
"""

__version__ = "0.1.0"

from ._config import RetryPolicy
from ._approval import gateway_approval
from ._secret import Secret
from .auth import AccessTokenAuth
from .dpop import DPoPKey
from .errors import (
    ApprovalRequired,
    ConfigError,
    Denied,
    Expired,
    ProtocolError,
    RateLimited,
    Rejected,
    TesseraError,
    Unauthenticated,
    Unavailable,
)
from .models import (
    AccessToken,
    AwsCredentials,
    Capability,
    Credential,
    DatabaseCredentials,
    GatewaySession,
    Placeholder,
)
from .runtime import AsyncRun, AsyncRuntime, Run, Runtime, run
from .tool import AsyncTool, Tool

__all__ = [
    "gateway_approval",
    "AccessToken",
    "AccessTokenAuth",
    "ApprovalRequired",
    "AsyncRun",
    "AsyncRuntime",
    "AsyncTool",
    "AwsCredentials",
    "Capability",
    "ConfigError",
    "Credential",
    "DPoPKey",
    "DatabaseCredentials",
    "Denied",
    "Expired",
    "GatewaySession",
    "Placeholder",
    "ProtocolError",
    "RateLimited",
    "Rejected",
    "RetryPolicy",
    "Run",
    "Runtime",
    "Secret",
    "TesseraError",
    "Tool",
    "Unauthenticated",
    "Unavailable",
    "__version__",
    "run",
]
