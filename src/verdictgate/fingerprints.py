"""Input fingerprints: the only way an input is identified outside the process."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable

from .errors import InputError

KEY_VARIABLE = "VERDICTGATE_FINGERPRINT_KEY"
KEY_ID_LABEL = b"verdictgate fingerprint key id v1"
"""What a key id is the HMAC of: a fixed label, so the id names the key and reveals nothing of it."""
_KEY_ID = re.compile(r"[0-9a-f]{16}")


def fingerprint_key(explicit: str | bytes | None = None) -> bytes | None:
    """The fingerprint key: the explicit one, else `VERDICTGATE_FINGERPRINT_KEY`, else None."""
    key = explicit if explicit is not None else os.environ.get(KEY_VARIABLE)
    if key is None or key == "":
        return None
    return key.encode() if isinstance(key, str) else key


def fingerprint(text: str, key: bytes | None) -> str:
    """`hmac-sha256:<hex>` of the text under the key, or `sha256:<hex>` when unkeyed. An input
    holding a lone surrogate is not text another door could send: InputError."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("an input holds a lone surrogate, which is not text") from None
    if key is None:
        return "sha256:" + hashlib.sha256(data).hexdigest()
    return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """A short id of a fingerprint key (16 hex digits of the HMAC of a fixed label under it):
    equal for one key, different for two, and no help in finding the key or an input."""
    return hmac.new(key, KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


def checked_key_id(value: object) -> str:
    """A key id as a record carries it; ValueError unless it is 16 lowercase hex digits."""
    if not isinstance(value, str) or not _KEY_ID.fullmatch(value):
        raise ValueError(f"must be 16 lowercase hex digits (a key id), got {value!r:.40}")
    return value


def input_names(
    text: str, key: bytes | None, named: str | None = None
) -> tuple[str, tuple[str, ...], str | None]:
    """How a trial names an input it has at hand: its name (`named`, an id given for it, else
    its fingerprint), its fingerprint as a further name when that is another, and the id of
    `key` when the fingerprint is keyed, unless `named` is a keyed name this fingerprint is
    not (made under another key, perhaps, so no one key id holds for both)."""
    made = fingerprint(text, key)
    case = made if named is None else named
    aliases = () if case == made else (made,)
    if key is None or (case != made and naming_scheme(case) == "keyed"):
        return case, aliases, None
    return case, aliases, key_id(key)


def naming_scheme(name: str) -> str:
    """How a case name was made: `unkeyed` (a plain SHA-256 of the input), `keyed` (an HMAC)
    or `case-ids` (an explicit, user-chosen id)."""
    if name.startswith("sha256:"):
        return "unkeyed"
    if name.startswith("hmac-sha256:"):
        return "keyed"
    return "case-ids"


def fingerprint_mode(case_ids: Iterable[str]) -> str:
    """How case ids identify inputs: `unkeyed` if any is a plain SHA-256 (guessable for short
    inputs), else `keyed` if any is an HMAC, else `case-ids` (explicit ids)."""
    mode = "case-ids"
    for case_id in case_ids:
        scheme = naming_scheme(case_id)
        if scheme == "unkeyed":
            return scheme
        if scheme == "keyed":
            mode = scheme
    return mode
