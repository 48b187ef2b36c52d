"""Dependencies point inward: instrumentation loads no engine, the statistics load nothing above
them, and the OTLP importer reads files without the receiver."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def loaded_after(statement: str) -> set[str]:
    """The verdictgate modules a fresh interpreter holds after `statement`."""
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {name for name in json.loads(out.stdout) if name.startswith("verdictgate")}


def test_the_decorator_loads_no_engine_admission_rule_or_statistics() -> None:
    loaded = loaded_after("import verdictgate; verdictgate.decision_point")
    assert "verdictgate.otel.instrument" in loaded  # the check can fail: it did load something
    heavy = {
        "verdictgate.engine",
        "verdictgate.admission",
        "verdictgate.stats",
        "verdictgate.sequential.rule",
        "verdictgate.eprocess",
        "verdictgate.level_thresholds",
        "verdictgate.assessment",
    }
    assert not loaded & heavy


BELOW = {  # each statistics module, and the modules it may load
    "verdictgate.eprocess": {"verdictgate.judgement"},
    "verdictgate.level_thresholds": {"verdictgate.judgement", "verdictgate.eprocess"},
    "verdictgate.stats": {
        "verdictgate.judgement",
        "verdictgate.eprocess",
        "verdictgate.level_thresholds",
    },
}


@pytest.mark.parametrize("module", sorted(BELOW))
def test_the_statistics_import_nothing_above_them(module: str) -> None:
    loaded = loaded_after(f"import {module}")
    assert loaded <= {"verdictgate", module, *BELOW[module]}


def test_the_otlp_importer_reads_without_the_receiver() -> None:
    loaded = loaded_after("import verdictgate.importers.otlp_json")
    assert "verdictgate.otel.otlp_reading" in loaded
    assert not {name for name in loaded if name.startswith("verdictgate.receiver")}
