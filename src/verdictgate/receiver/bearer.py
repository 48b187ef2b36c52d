"""The bearer token a receiver may ask for: checked the same way by both transports, the query
API and the pages' sign-in, in constant time."""

from __future__ import annotations

import hmac


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an `Authorization` header (or gRPC `authorization` metadata) carries `token`;
    always, when the receiver asks for none."""
    if token is None:
        return True
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.encode(), expected)
