"""Plug-ins by name, one registry per kind (reward, environment, task family, algorithm): the ones we ship and
room for outside ones.

An entry is an object or a lazy ``"module:attr"`` reference (``"module"``: the module itself), imported when
first asked for, so that naming a reward does not import sympy or a model. A module adds its own with
``register``; an installed package announces its own under the kind's entry-point group (``autotelic.rewards``,
``autotelic.environments``, ``autotelic.task_families``, ``autotelic.algorithms``), read only for a name the
table lacks. ``import_user_module`` imports a user's module by dotted path or file path.

This module imports only the standard library, so every layer, ``algorithms/`` included, may use it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _resolve(reference: str) -> Any:
    """What ``"module:attr"`` names (``"module"``: the module), as an entry point's value is read."""
    module, _, attribute = reference.partition(":")
    found: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        found = getattr(found, part)
    return found


class Registry(Generic[T]):
    """Names -> entries of one kind: built-ins first (in their order), then registered ones, then those installed
    packages announce under ``autotelic.<kind>s`` (sorted)."""

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None, *, tables: Sequence[str] = ()) -> None:
        self.kind = kind
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        self.group = f"autotelic.{plural.replace(' ', '_')}"  # autotelic.rewards, autotelic.task_families
        self._entries: dict[str, T | str] = dict(entries or {})  # a str is a lazy "module:attr" reference
        self._tables = tuple(tables)  # "module:ATTR" of a dict of many entries, merged in on first use

    def _table(self) -> dict[str, T | str]:
        if self._tables:
            loaded = [_resolve(table) for table in self._tables]
            for table in loaded:
                for name, entry in table.items():
                    self._entries.setdefault(name, entry)
            self._tables = ()
        return self._entries

    def register(self, name: str, entry: T | str) -> None:
        """Adds ``entry`` (an object or a lazy reference) under ``name``; a name taken by another entry is an error."""
        taken = self._table().get(name)
        if taken is not None and taken is not entry:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._entries[name] = entry

    def find(self, name: str) -> T | None:
        """The entry called ``name``, or None; an installed package's is imported each time it is asked for."""
        entry = self._table().get(name)
        if entry is None:
            return next((point.load() for point in entry_points(group=self.group, name=name)), None)
        if isinstance(entry, str):
            entry = self._entries[name] = _resolve(entry)
        return entry

    def get(self, name: str) -> T:
        """The entry called ``name``; a ValueError listing the valid names if there is none."""
        entry = self.find(name)
        if entry is None:
            raise ValueError(f"unknown {self.kind} '{name}'; valid: {', '.join(sorted(self.names()))}")
        return entry

    def names(self) -> list[str]:
        table = self._table()
        return [*table, *sorted({point.name for point in entry_points(group=self.group)} - set(table))]

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self.names()]

    def __contains__(self, name: str) -> bool:
        return self.find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


class ModuleFileNotFoundError(ModuleNotFoundError):
    """A user's module named by a file path where there is no file."""


@functools.lru_cache(maxsize=None)
def _file_module(path: Path) -> ModuleType:
    """A file loaded once as a module (its own directory importable, as ``python file.py`` would have it)."""
    spec = importlib.util.spec_from_file_location(f"autotelic_user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def import_user_module(where: str) -> ModuleType:
    """A user's module: ``path/to/file.py`` or a dotted path found on sys.path (``my_pkg.rewards``). Raises what
    importing it raises, ModuleFileNotFoundError for a file that is not there."""
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ModuleFileNotFoundError(f"file {where} not found", name=where)
        return _file_module(path)
    return importlib.import_module(where)


def is_missing(error: ModuleNotFoundError, where: str) -> bool:
    """Whether the module ``where`` itself (or a package above it) is missing, not a module it imports."""
    return error.name is not None and (where == error.name or where.startswith(error.name + "."))
