"""A string that never shows itself in ``repr``, ``str`` or an f-string."""

from __future__ import annotations

import hmac
from typing import Any

REDACTED = "<redacted>"


class Secret:
    """A secret value (a token, a password, a key).

    ``repr(s)``, ``str(s)`` and ``f"{s}"`` give ``<redacted>``, so a secret that
    ends up in a log line, a traceback's locals or an exception message does not
    leak. Call :meth:`reveal` where the value itself is needed (an HTTP header).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str):
            raise TypeError("Secret holds a str")
        self._value = value

    def reveal(self) -> str:
        """The secret itself. Handle with care: never log it."""
        return self._value

    # pydantic's spelling, for code written against SecretStr.
    get_secret_value = reveal

    def __repr__(self) -> str:
        return f"Secret({REDACTED})"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Secret):
            other = other._value
        if not isinstance(other, str):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other.encode())

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not pickled")


def secret(value: str | Secret | None) -> Secret | None:
    if value is None:
        return None
    return value if isinstance(value, Secret) else Secret(value)
