"""The shapes of what crosses the wire: decoded JSON, and OpenTelemetry attribute values.

Decoded JSON is `Any`, named once here (`JsonValue`): `json.loads` and msgspec give back
whatever the document held, and the code that reads a document checks each value (`isinstance`,
`type(x) is`) before it trusts it. Span attributes are typed as the OpenTelemetry SDK types
them (`AttributeValue`, and `Attributes`: a mapping of them, or None).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.util.types import Attributes, AttributeValue

__all__ = ["AttributeValue", "Attributes", "JsonObject", "JsonValue"]

JsonValue = Any  # boundary: decoded JSON
"""Decoded JSON: whatever `json.loads` or msgspec returns (a dict, list, str, int, float, bool
or None), before it is checked; also a value about to be encoded as JSON."""

JsonObject = dict[str, JsonValue]
"""A JSON object: a document decoded (its values not yet checked) or one built to be written."""
