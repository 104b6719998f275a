"""What the egress gateway says when a request waits for a human approval."""

from __future__ import annotations

from typing import Any

APPROVAL_HEADER = "Tessera-Approval-Id"


def gateway_approval(response: Any) -> str | None:
    """The approval a gateway refusal waits for: the ``Tessera-Approval-Id`` of a
    ``403 approval_pending`` (a ``requests`` or ``httpx`` response), else ``None``."""
    if getattr(response, "status_code", None) != 403:
        return None
    value = response.headers.get(APPROVAL_HEADER)
    return value if isinstance(value, str) and value else None
