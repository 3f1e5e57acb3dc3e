"""Name → class registries for etsim's plug-in points.

One :class:`Registry` instance exists per pluggable kind (network models, collective
algorithms, …). A name is resolved in this order:

1. names registered in-process: built-ins register themselves with :meth:`Registry.register`, and a
   registry made with ``builtins="package"`` imports every module of that package on its first lookup, so
   a built-in plug-in is one new module in it (nothing else lists it);
2. the entry-point group of the registry (loaded lazily, once; a name that clashes with an
   existing one triggers a warning and the first registration wins);
3. a ``package.module:Class`` path, imported on demand, or ``path/to/file.py:Class`` (a user's
   file, loaded once per path) — only where the user allowed it (:func:`plugins_allowed`): a name read from a
   downloaded topology, system or job file must not run code shipped with it;
4. otherwise :class:`~etsim.errors.RegistryError`, listing every available name.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from types import ModuleType
from typing import Generic, TypeVar

from etsim.errors import RegistryError

__all__ = ["PLUGINS_ENV", "Registry", "allowing_plugins", "plugins_allowed"]

T = TypeVar("T")


#: Names with this prefix resolve like any other but are not listed to users (tests publish plug-ins
#: under them to prove the entry-point path works).
HIDDEN_PREFIX = "etsim-test-"


#: The environment variable that lets ``module:Class`` and ``file.py:Class`` names import code: ``1`` for any
#: name, else the names allowed, separated by ``;``. An environment variable (not module state) so that worker
#: processes, forked or spawned, inherit the user's choice.
PLUGINS_ENV = "ETSIM_ALLOW_PLUGINS"

#: How a user allows plug-ins, for error messages.
HOW_TO_ALLOW = "allow it with --allow-plugins (or ETSIM_ALLOW_PLUGINS=1; in Python, etsim.allowing_plugins())"


def plugins_allowed(name: str) -> bool:
    """Whether the import path *name* may be imported: etsim's own modules always, others when allowed.

    Importing a module runs its code, so a name taken from a data file (a topology's ``network.model``, an
    experiment's ``engine``) imports only what the user allowed: all plug-ins (``ETSIM_ALLOW_PLUGINS=1``, the
    command line's ``--allow-plugins``) or this name (one the user typed in a flag).
    """
    module_name = name.rpartition(":")[0]
    if module_name == "etsim" or module_name.startswith("etsim."):
        return not module_name.endswith(".py")  # etsim's own code is installed, not shipped with a file
    value = os.environ.get(PLUGINS_ENV, "").strip()
    return value == "1" or name in value.split(";")


@contextlib.contextmanager
def allowing_plugins(names: Iterable[str] | None = None) -> Iterator[None]:
    """Allow every plug-in (*names* ``None``) or the plug-ins *names* while the block runs (restored after).

    Raises:
        RegistryError: a name that is no plug-in name (``pkg.module:Class``, ``file.py:Class``); one name may be
            given as a string.
    """
    before = os.environ.get(PLUGINS_ENV)
    if names is None:
        os.environ[PLUGINS_ENV] = "1"
    else:
        given = [names] if isinstance(names, str) else list(names) if isinstance(names, Iterable) else [names]
        for name in given:  # (a name without a colon, or a string taken letter by letter, allowed nothing)
            if not isinstance(name, str) or ":" not in name or ";" in name:
                raise RegistryError(
                    f"allowing_plugins: {name!r} is not a plug-in name ('pkg.module:Class' or 'file.py:Class')"
                )
        extra = ";".join(given)
        os.environ[PLUGINS_ENV] = ";".join(v for v in (before, extra) if v) if before != "1" else "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PLUGINS_ENV, None)
        else:
            os.environ[PLUGINS_ENV] = before


def _load_file(path: str, kind: str, name: str) -> ModuleType:
    """Import a plug-in from a Python file (once per absolute path: its module is named after the path)."""
    full = os.path.abspath(path)
    module_name = "etsim_plugin_" + full.encode().hex()  # one name per path (hashlib would load OpenSSL: 3 MB)
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    if not os.path.isfile(full):
        raise RegistryError(f"{kind} {name!r}: no such file {full}")
    spec = importlib.util.spec_from_file_location(module_name, full)
    if spec is None or spec.loader is None:
        raise RegistryError(f"{kind} {name!r}: cannot load {full} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look classes up through sys.modules
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: report, don't crash
        del sys.modules[spec.name]
        raise RegistryError(f"{kind} {name!r}: {full} failed to import: {type(exc).__name__}: {exc}") from None
    return module


class Registry(Generic[T]):
    """A registry of plug-in classes of one kind.

    Args:
        kind: what the registry holds, used in error messages ("network model").
        group: the entry-point group scanned for third-party plug-ins.
        base: plug-ins must be subclasses of this class.
        builtins: a package every module of which registers built-ins (imported on the first lookup).
    """

    def __init__(self, kind: str, group: str, base: type[T], *, builtins: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self.base = base
        self.builtins = builtins
        self._items: dict[str, type[T]] = {}
        self._from_entry_points: set[str] = set()
        self._entry_points_loaded = False
        self._builtins_loaded = builtins is None

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator registering a built-in under *name*; a duplicate name raises."""

        def decorate(cls: type[T]) -> type[T]:
            if name in self._items and self._items[name] is not cls:
                raise RegistryError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {cls!r})")
            self._items[name] = cls
            return cls

        return decorate

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        assert self.builtins is not None
        package = importlib.import_module(self.builtins)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.builtins}.{info.name}")

    def _load_entry_points(self) -> None:
        self._load_builtins()
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in metadata.entry_points(group=self.group):
            if ep.name in self._items:
                warnings.warn(
                    f"entry point {ep.name!r} in group {self.group} clashes with an existing {self.kind}; ignored",
                    RuntimeWarning,
                    stacklevel=3,
                )
                continue
            try:
                cls = ep.load()
            except Exception as exc:  # a broken third-party plug-in must not break etsim
                warnings.warn(f"cannot load {self.kind} plug-in {ep.name!r}: {exc}", RuntimeWarning, stacklevel=3)
                continue
            self._items[ep.name] = self._check(ep.name, cls)
            self._from_entry_points.add(ep.name)

    def _check(self, name: str, obj: object) -> type[T]:
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise RegistryError(f"{self.kind} {name!r} is {obj!r}, not a subclass of {self.base.__name__}")
        return obj

    def items(self) -> list[tuple[str, type[T]]]:
        """Every ``(name, class)`` available without an import path (built-ins first, then entry points)."""
        self._load_entry_points()
        return list(self._items.items())

    def reload_entry_points(self) -> None:
        """Forget the entry points loaded so far and scan the group again on next use.

        For tests and long-lived processes that install plug-ins after the first lookup.
        """
        for name in self._from_entry_points:
            self._items.pop(name, None)
        self._from_entry_points.clear()
        self._entry_points_loaded = False

    def names(self) -> list[str]:
        """All names available without an import path, sorted (test-only ``etsim-test-*`` names left out)."""
        self._load_entry_points()
        return sorted(name for name in self._items if not name.startswith(HIDDEN_PREFIX))

    def describe(self, default: str | None = None) -> str:
        """Every listed name with what its class's ``summary`` says, for ``--help``: ``a (default; …), b (…)``."""
        parts = []
        for name in self.names():
            cls = self._items[name]
            summary = getattr(cls, "summary", "")
            notes = (["default"] if name == default else []) + ([summary] if summary else [])
            parts.append(f"{name} ({'; '.join(notes)})" if notes else name)
        return ", ".join(parts)

    def get(self, name: str) -> type[T]:
        """Resolve *name* to a plug-in class; raise :class:`RegistryError` listing the choices."""
        if name in self._items:
            return self._items[name]
        self._load_builtins()
        if name in self._items:
            return self._items[name]
        self._load_entry_points()
        if name in self._items:
            return self._items[name]
        if ":" in name:
            module_name, _, attr = name.rpartition(":")
            if not module_name or not attr:
                raise RegistryError(
                    f"{self.kind} {name!r}: expected 'package.module:Class' or 'file.py:Class' with both parts given"
                )
            if not plugins_allowed(name):
                raise RegistryError(
                    f"{self.kind} {name!r} is a plug-in: importing it runs its code, so {HOW_TO_ALLOW}, "
                    f"or install it as an entry point of group {self.group}"
                )
            if module_name.endswith(".py"):
                module = _load_file(module_name, self.kind, name)
            else:
                try:
                    module = importlib.import_module(module_name)
                except (ImportError, ValueError, TypeError) as exc:  # a relative (TypeError) or unusable name
                    raise RegistryError(
                        f"cannot import module {module_name!r} for {self.kind} {name!r}: {exc}"
                    ) from None
            try:
                obj = getattr(module, attr)
            except AttributeError:
                raise RegistryError(
                    f"module {module_name!r} has no attribute {attr!r} ({self.kind} {name!r})"
                ) from None
            return self._check(name, obj)
        available = ", ".join(self.names()) or "(none)"
        raise RegistryError(
            f"unknown {self.kind} {name!r}; available: {available}; or give a 'package.module:Class' path"
        )
