"""Agents under test: how they are called, loaded and what their answers mean."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..assessment import Isolation
from ..errors import InputError


@dataclass(frozen=True)
class Agent:
    """A decision point to call with a case input, and how its reruns are isolated.

    With `factory` set, a fresh instance is built for every trial (isolation fresh-instance).
    """

    call: Callable[[str], Any]
    isolation: Isolation = Isolation.UNKNOWN
    factory: Callable[[], Callable[[str], Any]] | None = None

    @property
    def is_async(self) -> bool:
        """Whether calls return awaitables (an `async def` agent)."""
        return inspect.iscoroutinefunction(self.call) or inspect.iscoroutinefunction(
            getattr(self.call, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )

    def instance(self) -> Callable[[str], Any]:
        """The callable to use for one trial."""
        return self.factory() if self.factory is not None else self.call


def from_callable(
    function: Agent | Callable[[str], Any], *, isolation: Isolation | str = Isolation.UNKNOWN
) -> Agent:
    """Wrap a sync or async callable `input -> decision` as an Agent."""
    if isinstance(function, Agent):
        return function
    if not callable(function):
        raise TypeError(f"an agent must be callable, got {type(function).__name__}")
    return Agent(function, Isolation(isolation))


def from_factory(
    factory: Callable[[], Callable[[str], Any]], *, fresh_instance: bool = True
) -> Agent:
    """An Agent built by `factory()`; with `fresh_instance`, a new one for every trial."""
    first = factory()
    if not callable(first):
        raise TypeError(f"the factory must return a callable agent, got {type(first).__name__}")
    if fresh_instance:
        return Agent(first, Isolation.FRESH_INSTANCE, factory)
    return Agent(first)


def load_attribute(spec: str, option: str) -> Any:
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


def _load_file(path: Path, option: str) -> Any:
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


def load_factory(spec: str) -> Callable[[], Any]:
    """Load `FILE.py:FACTORY` or `module:FACTORY` and return the factory callable."""
    found = load_attribute(spec, "--agent")
    if not callable(found):
        raise InputError(f"{spec.rpartition(':')[2]!r} is not a callable", field="--agent")
    factory: Callable[[], Any] = found
    return factory
