"""Registries of the package's pluggable parts: pruning methods (name -> HeadPruner subclass, filled by
:func:`register` in this package's modules and by the entry-point group ``headprune_bench.methods``) and, through
the same :class:`Registry`, repairs (:mod:`headprune_bench.methods.repairs`). See docs/heads.md ("Registry and
discovery")."""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import pkgutil
from pathlib import Path
from typing import Any, Generic, TypeVar

from headprune_bench.methods.base import HeadPruner
from headprune_bench.methods.repair import Repair

ENTRY_POINT_GROUP = "headprune_bench.methods"
REPAIR_ENTRY_POINT_GROUP = "headprune_bench.repairs"

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered. The message lists the known names and a close match."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class UnknownMethodError(UnknownNameError):
    """A method name that is not registered."""


class UnknownRepairError(UnknownNameError):
    """A repair name that is not registered."""


class Registry(Generic[T]):
    """Name -> subclass of ``base`` (each with a ``name`` class attribute), filled by :meth:`register` when the
    modules of ``package`` (the folder ``folder``) are imported and from the entry points of ``group``.

    ``kind`` (``method``, ``repair``) names the entries in messages; ``error`` is raised for an unknown name.
    """

    def __init__(self, base: type, kind: str, package: str, folder: Path, group: str | None,
                 error: type[UnknownNameError] = UnknownNameError):
        self.base, self.kind, self.package, self.folder, self.group, self.error = \
            base, kind, package, folder, group, error
        self.entries: dict[str, type[T]] = {}
        self.sources: dict[str, str] = {}
        self.discovered = False

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: add ``cls`` under ``cls.name``.

        Raises:
            TypeError: ``cls`` is not a subclass of the base or has no name.
            ValueError: another class already holds that name.
        """
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"register() expects a {self.base.__name__} subclass, got {cls!r}")
        if not cls.name:
            raise TypeError(f"{cls.__qualname__} has no `name` class attribute")
        existing = self.entries.get(cls.name)
        if existing is not None and existing is not cls:
            raise ValueError(f"{self.kind} name '{cls.name}' is already registered by "
                             f"{existing.__module__}.{existing.__qualname__}")
        self.entries[cls.name] = cls
        self.sources.setdefault(cls.name, cls.__module__)
        return cls

    def discover(self) -> None:
        """Import the package's modules (not ``_private`` ones) and load the entry points, once."""
        if self.discovered:
            return
        self.discovered = True
        for info in pkgutil.iter_modules([str(self.folder)]):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")
        if self.group:
            for ep in importlib.metadata.entry_points(group=self.group):
                cls = ep.load()
                self.register(cls)
                self.sources[cls.name] = f"entry point {ep.value}"

    def available(self) -> dict[str, type[T]]:
        """Every registered class, sorted by name."""
        self.discover()
        return dict(sorted(self.entries.items()))

    def shipped(self) -> dict[str, type[T]]:
        """The classes of this package and of entry points, sorted by name (not classes registered on the fly,
        e.g. by a test module)."""
        return {name: cls for name, cls in self.available().items()
                if cls.__module__.startswith(self.package + ".")
                or self.sources.get(name, "").startswith("entry point")}

    def source(self, name: str) -> str:
        """Where ``name`` comes from (module or entry point)."""
        self.discover()
        return self.sources.get(name, "?")

    def get(self, name: str) -> type[T]:
        """The class registered under ``name``.

        Raises:
            UnknownNameError (``error``): with the list of known names and a "did you mean" suggestion.
        """
        self.discover()
        try:
            return self.entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.entries), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise self.error(f"unknown {self.kind} '{name}'{hint}; known {self.kind}s: "
                             f"{', '.join(sorted(self.entries))}") from None


METHODS: Registry[HeadPruner] = Registry(HeadPruner, "method", "headprune_bench.methods", Path(__file__).parent,
                                         ENTRY_POINT_GROUP, UnknownMethodError)
"""The pruning methods."""


def register(cls: type[HeadPruner]) -> type[HeadPruner]:
    """Class decorator: add a :class:`HeadPruner` subclass to the registry under ``cls.name``.

    Raises:
        TypeError: ``cls`` is not a HeadPruner subclass or has no name.
        ValueError: another class already holds that name.
    """
    return METHODS.register(cls)


def available_methods() -> dict[str, type[HeadPruner]]:
    """All registered methods, sorted by name."""
    return METHODS.available()


def shipped_methods() -> dict[str, type[HeadPruner]]:
    """The registered methods of this package and of entry points, sorted by name (not classes registered on the
    fly, e.g. by a test module)."""
    return METHODS.shipped()


def in_methods_all(cls: type[HeadPruner]) -> bool:
    """Whether ``--methods all`` selects ``cls``: its ``in_methods_all`` when set, else whether it is no ablation."""
    return cls.in_methods_all if cls.in_methods_all is not None else not cls.ablation_of


def method_source(name: str) -> str:
    """Where a method comes from (module or entry point)."""
    return METHODS.source(name)


def get_method_class(name: str) -> type[HeadPruner]:
    """The class registered under ``name``.

    Raises:
        UnknownMethodError: with the list of known names and a "did you mean" suggestion.
    """
    return METHODS.get(name)


def create(name: str, **options: Any) -> HeadPruner:
    """Instantiate the method ``name`` with ``options`` (see each method's ``defaults``)."""
    return get_method_class(name)(**options)


REPAIRS: Registry[Repair] = Registry(Repair, "repair", "headprune_bench.methods.repairs",
                                     Path(__file__).parent / "repairs", REPAIR_ENTRY_POINT_GROUP, UnknownRepairError)
"""The repairs (:mod:`headprune_bench.methods.repairs`)."""


def register_repair(cls: type[Repair]) -> type[Repair]:
    """Class decorator: add a :class:`~headprune_bench.methods.repair.Repair` subclass under ``cls.name``.

    Raises:
        TypeError: not a Repair subclass, or no name. ValueError: another class holds that name.
    """
    return REPAIRS.register(cls)


def available_repairs() -> dict[str, type[Repair]]:
    """Every registered repair, sorted by name."""
    return REPAIRS.available()


def get_repair_class(name: str) -> type[Repair]:
    """The repair registered under ``name``.

    Raises:
        UnknownRepairError: with the list of known repairs and a "did you mean" suggestion.
    """
    return REPAIRS.get(name)


def create_repair(name: str, **options: Any) -> Repair:
    """Instantiate the repair ``name`` with ``options``. Raises UnknownRepairError, OptionError."""
    return get_repair_class(name)(**options)
