"""Input fingerprints: the only way an input is identified outside the process."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable

KEY_VARIABLE = "VERDICTGATE_FINGERPRINT_KEY"


def fingerprint_key(explicit: str | bytes | None = None) -> bytes | None:
    """The fingerprint key: the explicit one, else `VERDICTGATE_FINGERPRINT_KEY`, else None."""
    key = explicit if explicit is not None else os.environ.get(KEY_VARIABLE)
    if key is None or key == "":
        return None
    return key.encode() if isinstance(key, str) else key


def fingerprint(text: str, key: bytes | None) -> str:
    """`hmac-sha256:<hex>` of the text under the key, or `sha256:<hex>` when unkeyed."""
    data = text.encode("utf-8")
    if key is None:
        return "sha256:" + hashlib.sha256(data).hexdigest()
    return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()


def fingerprint_mode(case_ids: Iterable[str]) -> str:
    """How case ids identify inputs: `unkeyed` if any is a plain SHA-256 (guessable for short
    inputs), else `keyed` if any is an HMAC, else `case-ids` (explicit ids)."""
    mode = "case-ids"
    for case_id in case_ids:
        if case_id.startswith("sha256:"):
            return "unkeyed"
        if case_id.startswith("hmac-sha256:"):
            mode = "keyed"
    return mode
