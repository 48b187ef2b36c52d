"""The public surface is `verdictgate.__all__`, written once: every name imports and is
documented in docs/api.md, every error a user can get is a VerdictgateError, and the docs and
examples reach nothing else."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import verdictgate

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"
INTERNAL_EXCEPTIONS = {
    "verdictgate.receiver.http.refusals.HttpError": "answered as an HTTP status by the server",
    "verdictgate.receiver.http.refusals.ClientGone": "the server's: a client that hung up",
    "verdictgate.receiver.http.handler.BodyPending": "the server's: a body read by its poller",
    "verdictgate.receiver.ingest.fair_gate.Busy": "answered 503/UNAVAILABLE with a retry delay",
    "verdictgate.receiver.ingest.decoding.DecoderUnavailable": "answered 503/UNAVAILABLE",
    "verdictgate.otel.otlp_reading.MalformedRequest": "answered 400/INVALID_ARGUMENT",
    "verdictgate.runner.suite_run._Timeout": "a trial's timeout, recorded as an error trial",
    "verdictgate.receiver.store.connection.CopyRepeated": "the store's: its group done again",
}
"""Exceptions that never leave the package: each is caught where it is raised."""


def documented_names() -> set[str]:
    """The names in the first column of docs/api.md's tables."""
    return set(re.findall(r"^\| `([A-Za-z_]+)` \|", API.read_text(), re.M))


def declared_imports() -> dict[str, str]:
    """Each name the TYPE_CHECKING block of `verdictgate/__init__.py` imports -> the module it
    imports it from, read from its source: what the lazy table must hold."""
    tree = ast.parse((ROOT / "src" / "verdictgate" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If))
    return {
        alias.asname or alias.name: f"verdictgate.{node.module}"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }


def test_every_public_name_imports_from_its_module_and_is_documented():
    declared = declared_imports()
    exported = set(verdictgate.__all__)
    assert exported == set(declared) and len(exported) > 60
    for name in sorted(exported):
        value = getattr(verdictgate, name)
        assert value is getattr(importlib.import_module(declared[name]), name), name
    documented = documented_names()
    assert exported - documented == set(), "exported but not in docs/api.md"
    assert documented - exported == set(), "in docs/api.md but not exported"


def test_importing_the_package_reads_no_bytecode_and_loads_no_public_module():
    """`import verdictgate` loads what a name needs only on its first use, and its table is
    source, not bytecode: nothing in `__init__.py` imports `dis` or reads a code object."""
    source = (ROOT / "src" / "verdictgate" / "__init__.py").read_text()
    imported = {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported == {"importlib"} and "get_code" not in source and "co_code" not in source
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, verdictgate; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "verdictgate" in loaded
    assert not {"dis", *set(declared_imports().values())} & set(loaded)


def test_every_error_a_user_can_get_is_a_verdictgate_error():
    public = [getattr(verdictgate, name) for name in verdictgate.__all__]
    errors = [
        value for value in public if inspect.isclass(value) and issubclass(value, BaseException)
    ]
    assert verdictgate.InputError in errors  # the check can fail: it found the errors
    assert all(issubclass(error, verdictgate.VerdictgateError) for error in errors)
    found = {}
    for module in pkgutil.walk_packages(verdictgate.__path__, "verdictgate."):
        if module.name.startswith("verdictgate.v1") or module.name.endswith("__main__"):
            continue  # generated code; a module that runs the CLI when imported
        for name, value in vars(importlib.import_module(module.name)).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.name
            ):
                found[f"{module.name}.{name}"] = value
    loose = {
        name
        for name, error in found.items()
        if not issubclass(error, verdictgate.VerdictgateError) and name not in INTERNAL_EXCEPTIONS
    }
    assert not loose, f"raise a VerdictgateError, or say why it never leaves: {sorted(loose)}"
    assert set(INTERNAL_EXCEPTIONS) <= set(found), "an internal exception named here is gone"


def python_sources() -> list[tuple[str, str]]:
    """(where, code) of every example and every Python block of the README and docs."""
    sources = [
        (str(path.relative_to(ROOT)), path.read_text())
        for path in sorted((ROOT / "examples").rglob("*.py"))
    ]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, block in enumerate(
            re.findall(r"^```python[^\n]*\n(.*?)^```", page.read_text(), re.S | re.M)
        ):
            sources.append((f"{page.name} block {number + 1}", block))
    return sources


def reached_internals(code: str) -> list[str]:
    """The verdictgate modules or names outside `__all__` that code imports or reaches."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("verdictgate.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verdictgate"):
            if node.module != "verdictgate":
                found.append(node.module or "")
            found += [
                a.name
                for a in node.names
                if node.module == "verdictgate" and a.name not in verdictgate.__all__
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "verdictgate"
            and node.attr not in verdictgate.__all__
        ):
            found.append(f"verdictgate.{node.attr}")
    return found


def test_docs_and_examples_use_the_public_surface_only():
    assert reached_internals("import verdictgate.receiver.store\nverdictgate.Suite") == [
        "verdictgate.receiver.store"
    ]  # the check can fail
    assert reached_internals("from verdictgate.frameworks import from_strands") == [
        "verdictgate.frameworks"
    ]
    reached = {
        where: found for where, code in python_sources() if (found := reached_internals(code))
    }
    assert not reached, reached
