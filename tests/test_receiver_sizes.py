"""The receiver stays in pieces a newcomer can hold: no module of `receiver/` over 450 lines, no
class over 350 lines or 25 methods (issue 37)."""

from __future__ import annotations

import ast
from pathlib import Path

import verdictgate.receiver

RECEIVER = Path(verdictgate.receiver.__file__).parent
MODULE_LINES, CLASS_LINES, CLASS_METHODS = 450, 350, 25


def test_no_receiver_module_or_class_outgrows_its_bound() -> None:
    modules = sorted(RECEIVER.rglob("*.py"))
    assert len(modules) > 20  # the check can fail: it read the package
    too_big = []
    for module in modules:
        text = module.read_text()
        name = module.relative_to(RECEIVER)
        if (lines := text.count("\n")) > MODULE_LINES:
            too_big.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                methods = sum(
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body
                )
                if lines > CLASS_LINES or methods > CLASS_METHODS:
                    too_big.append(f"{name}: {node.name}, {lines} lines, {methods} methods")
    assert too_big == []
