"""Registry of pruning methods: name -> :class:`~headprune_bench.methods.base.HeadPruner` subclass, filled by
:func:`register` in this package's modules and by the entry-point group ``headprune_bench.methods``. See
docs/heads.md ("Registry and discovery")."""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import pkgutil
from pathlib import Path
from typing import Any

from headprune_bench.methods.base import HeadPruner

ENTRY_POINT_GROUP = "headprune_bench.methods"

_REGISTRY: dict[str, type[HeadPruner]] = {}
_SOURCES: dict[str, str] = {}
_discovered = False


class UnknownMethodError(KeyError):
    """A method name that is not registered. The message lists the known names and a close match."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def register(cls: type[HeadPruner]) -> type[HeadPruner]:
    """Class decorator: add a :class:`HeadPruner` subclass to the registry under ``cls.name``.

    Raises:
        TypeError: ``cls`` is not a HeadPruner subclass or has no name.
        ValueError: another class already holds that name.
    """
    if not (isinstance(cls, type) and issubclass(cls, HeadPruner)):
        raise TypeError(f"register() expects a HeadPruner subclass, got {cls!r}")
    if not cls.name:
        raise TypeError(f"{cls.__qualname__} has no `name` class attribute")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(
            f"method name '{cls.name}' is already registered by {existing.__module__}.{existing.__qualname__}")
    _REGISTRY[cls.name] = cls
    _SOURCES.setdefault(cls.name, cls.__module__)
    return cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{__package__}.{info.name}")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        cls = ep.load()
        register(cls)
        _SOURCES[cls.name] = f"entry point {ep.value}"


def available_methods() -> dict[str, type[HeadPruner]]:
    """All registered methods, sorted by name."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def shipped_methods() -> dict[str, type[HeadPruner]]:
    """The registered methods of this package and of entry points, sorted by name (not classes registered on the
    fly, e.g. by a test module)."""
    _discover()
    return {name: cls for name, cls in available_methods().items()
            if cls.__module__.startswith("headprune_bench.methods.")
            or _SOURCES.get(name, "").startswith("entry point")}


def in_methods_all(cls: type[HeadPruner]) -> bool:
    """Whether ``--methods all`` selects ``cls``: its ``in_methods_all`` when set, else whether it is no ablation."""
    return cls.in_methods_all if cls.in_methods_all is not None else not cls.ablation_of


def method_source(name: str) -> str:
    """Where a method comes from (module or entry point)."""
    _discover()
    return _SOURCES.get(name, "?")


def get_method_class(name: str) -> type[HeadPruner]:
    """The class registered under ``name``.

    Raises:
        UnknownMethodError: with the list of known names and a "did you mean" suggestion.
    """
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UnknownMethodError(
            f"unknown method '{name}'{hint}; known methods: {', '.join(sorted(_REGISTRY))}"
        ) from None


def create(name: str, **options: Any) -> HeadPruner:
    """Instantiate the method ``name`` with ``options`` (see each method's ``defaults``)."""
    return get_method_class(name)(**options)
