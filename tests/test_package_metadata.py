"""The installed package's metadata: what `pip show` and the package index will display."""

from __future__ import annotations

import importlib.metadata


def test_the_license_is_an_spdx_expression():
    metadata = importlib.metadata.metadata("verdictgate")
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get("License") is None  # the deprecated table form is gone
