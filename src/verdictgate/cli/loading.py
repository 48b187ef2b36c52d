"""Loading the user code an option names (`FILE.py:NAME` or `module:NAME`): agents, invariants
and judges."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InputError

UserObject = Any  # boundary: user code
"""What `FILE.py:NAME` or `module:NAME` names in the user's code: unknown until the option that
names it checks it (callable, an Invariant, a list of them)."""


def load_attribute(spec: str, option: str) -> UserObject:
    """Load NAME from `FILE.py:NAME` or `module:NAME`; errors name `option`."""
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name:
        raise InputError("expected FILE.py:NAME or module:NAME", field=option)
    if source.endswith(".py"):
        module = _load_file(Path(source), option)
    else:
        try:
            module = importlib.import_module(source)
        except Exception as error:
            raise InputError(f"cannot import module {source!r} ({error})", field=option) from None
    if not hasattr(module, name):
        raise InputError(f"{source} has no {name!r}", field=option)
    return getattr(module, name)


def _load_file(path: Path, option: str) -> ModuleType:
    """A Python file as a module, loaded once however many options name it."""
    if not path.is_file():
        raise InputError("no such file", path=str(path), field=option)
    module_name = f"_verdictgate_user_{path.resolve()}".replace(".", "_").replace("/", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec_obj = importlib.util.spec_from_file_location(module_name, path)
    if spec_obj is None or spec_obj.loader is None:
        raise InputError("cannot load as a Python module", path=str(path), field=option)
    module = importlib.util.module_from_spec(spec_obj)
    sys.modules[module_name] = module
    try:
        spec_obj.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise InputError(
            f"cannot load: {type(error).__name__}: {error}", path=str(path), field=option
        ) from None
    return module


def load_factory(spec: str) -> Callable[[], UserObject]:
    """Load `FILE.py:FACTORY` or `module:FACTORY` and return the factory callable."""
    found = load_attribute(spec, "--agent")
    if not callable(found):
        raise InputError(f"{spec.rpartition(':')[2]!r} is not a callable", field="--agent")
    factory: Callable[[], UserObject] = found
    return factory
