"""boto3 sessions whose credentials come from Tessera (the ``aws`` extra)."""

from __future__ import annotations

from typing import Any, Callable

import boto3  # type: ignore[import-untyped]
from botocore.credentials import RefreshableCredentials  # type: ignore[import-untyped]
from botocore.session import get_session  # type: ignore[import-untyped]

from .models import AwsCredentials

# botocore refreshes credentials that expire within 15 minutes before every call
# and must refresh those within 10: with a capability of 10 or 15 minutes every
# call would fetch a new one. These windows fit Tessera's short capabilities.
ADVISORY_REFRESH = 60
MANDATORY_REFRESH = 20


class _TesseraCredentials(RefreshableCredentials):  # type: ignore[misc]
    _advisory_refresh_timeout = ADVISORY_REFRESH
    _mandatory_refresh_timeout = MANDATORY_REFRESH

    def __repr__(self) -> str:
        return f"TesseraAwsCredentials(access_key={self._access_key!r}, secret_key=<redacted>, token=<redacted>)"


def _metadata(creds: AwsCredentials) -> dict[str, Any]:
    return {
        "access_key": creds.access_key_id,
        "secret_key": creds.secret_access_key.reveal(),
        "token": creds.session_token.reveal(),
        "expiry_time": creds.expires_at.isoformat(),
    }


def session(fetch: Callable[[], AwsCredentials], region_name: str | None) -> boto3.Session:
    first = fetch()
    credentials = _TesseraCredentials.create_from_metadata(
        metadata=_metadata(first),
        refresh_using=lambda: _metadata(fetch()),
        method="tessera",
    )
    # botocore's own windows, set per instance too (newer botocore reads them there).
    credentials._advisory_refresh_timeout = ADVISORY_REFRESH
    credentials._mandatory_refresh_timeout = MANDATORY_REFRESH
    core = get_session()
    core._credentials = credentials
    region = region_name or first.region
    if region:
        core.set_config_variable("region", region)
    return boto3.Session(botocore_session=core)
