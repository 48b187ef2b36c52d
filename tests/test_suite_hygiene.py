"""The suite's own rules, checked on its source: a test reaches the code under test through
names without a leading underscore only (never a private attribute, function or module),
shares helpers through support modules (never by importing another test
module), and sets no wall-clock bound on its examples."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent

ALLOWED = {
    "opentelemetry._logs": "the OpenTelemetry API's logs module, documented under that name",
    "opentelemetry.sdk._logs": "the OpenTelemetry SDK's logs package, documented under that name",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter": (
        "the OTLP/gRPC logs exporter, documented under that name"
    ),
    "os._exit": "the standard library's documented exit without clean-up (a forked child's)",
}
"""Dotted names with a leading underscore that are a third party's documented API."""

ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}
"""Calls whose second argument names an attribute (builtins, and monkeypatch's methods)."""

TARGET_FUNCTIONS = {"setattr", "delattr", "patch"}
"""Calls that may name their target as one dotted string (`monkeypatch.setattr("m.x", v)`)."""


def private(name: str) -> bool:
    """A single leading underscore; dunder names (`__name__`) are public."""
    return name.startswith("_") and not name.startswith("__")


def allowed(dotted: str) -> bool:
    return any(dotted == name or dotted.startswith(name + ".") for name in ALLOWED)


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attributes on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_path(dotted: str) -> bool:
    return any(private(part) for part in dotted.split(".")) and not allowed(dotted)


def violations(source: str, filename: str = "<sample>") -> list[str]:
    """`file:line: what` for every breach of the rules in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            dotted = dotted_name(node)
            if dotted is None or not allowed(dotted):
                found.append(f"{where}: reads a private attribute: {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            function = node.func
            called = getattr(function, "id", None) or getattr(function, "attr", None)
            strings = [
                argument.value if isinstance(argument, ast.Constant) else None
                for argument in node.args[:2]
            ]
            named = strings[1] if len(strings) > 1 else None
            if called in ATTRIBUTE_FUNCTIONS and isinstance(named, str) and private(named):
                found.append(f"{where}: names a private attribute: {ast.unparse(node)}")
            target = strings[0] if strings else None
            if (
                called in TARGET_FUNCTIONS
                and isinstance(target, str)
                and "." in target
                and private_path(target)
            ):
                found.append(f"{where}: names a private attribute: {ast.unparse(node)}")
        elif isinstance(node, ast.Import):
            found += [f"{where}: {what}" for a in node.names for what in module_breaches(a.name)]
        elif isinstance(node, ast.ImportFrom):
            found += [f"{where}: {what}" for what in module_breaches(node.module or "")]
            found += [
                f"{where}: imports a private name: {alias.name}"
                for alias in node.names
                if private(alias.name) and not allowed(f"{node.module}.{alias.name}")
            ]
    return found


def module_breaches(module: str) -> list[str]:
    if module.split(".")[0].startswith("test_"):
        return [f"imports the test module {module}: move what it shares into a support module"]
    if private_path(module):
        return [f"imports the private module {module}"]
    return []


def test_no_test_reads_a_private_name_or_imports_another_test_module() -> None:
    found = [
        violation
        for path in sorted(TESTS.glob("*.py"))
        for violation in violations(path.read_text(), path.name)
    ]
    assert not found, "\n".join(found)


def test_the_rules_catch_what_they_forbid_and_pass_what_they_allow() -> None:
    assert violations("value = obj._secret\n", "sample.py") == [
        "sample.py:1: reads a private attribute: obj._secret"
    ]
    forbidden = [
        "decoder._pool._initializer.__name__",  # two private attributes, one after the other
        'getattr(obj, "_secret")',
        'monkeypatch.setattr(module, "_LIMIT", 1)',
        'monkeypatch.setattr("package.module._LIMIT", 1)',
        "from package.module import _helper",
        "from package._internal import helper",
        "from test_other import helper",
        "import test_other",
    ]
    caught = violations("\n".join(forbidden))
    assert sorted({int(v.split(":")[1]) for v in caught}) == list(range(1, len(forbidden) + 1))
    assert len(caught) == len(forbidden) + 1, caught
    permitted = [
        "self._own, cls._own, obj.__class__, obj.public",
        'getattr(obj, "public"), getattr(obj, "__name__")',
        'monkeypatch.setattr(module, "LIMIT", 1)',
        "os._exit(0)",
        "from opentelemetry.sdk._logs import LoggerProvider",
        "from opentelemetry._logs import get_logger_provider",
        "from __future__ import annotations",
        "from receiver_support import running_server",
    ]
    assert violations("\n".join(permitted)) == []


def test_hypothesis_sets_no_deadline() -> None:
    """A deadline is a wall-clock bound on every example: on a busy machine it fails a test
    whose property holds (conftest.py loads a profile without one)."""
    assert settings().deadline is None
