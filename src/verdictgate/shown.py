"""Long labels as people see them: a decision label or tool path may hold 4,096 characters (a
path, 256 steps of them), so reports and messages show a long one shortened, its head and tail
kept and its length and fingerprint added, so two labels stay apart and a reader can still
match one to its source."""

from __future__ import annotations

import hashlib

SHOWN_CHARS = 160
"""The longest label shown whole."""
_HEAD = 96
_TAIL = 32


def shown(label: str, limit: int = SHOWN_CHARS) -> str:
    """`label`, or when longer than `limit` its first 96 and last 32 characters around an
    ellipsis, then `[N chars #fingerprint]` (the first 10 hex digits of its SHA-256): at most
    160 characters."""
    if len(label) <= limit:
        return label
    digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{label[:_HEAD]}…{label[-_TAIL:]} [{len(label):,} chars #{digest}]"
