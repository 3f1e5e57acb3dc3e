"""Registries: built-ins found as one module each, entry points, ``module:Class``, and the names they list."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from etsim.errors import RegistryError
from etsim.registry import Registry


class Base:
    """A plug-in kind."""

    summary = ""


def test_a_builtins_package_is_imported_on_the_first_lookup_one_module_per_plug_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "plugins_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    registry: Registry[Base] = Registry("thing", "etsim.test_things", Base, builtins="plugins_pkg")
    monkeypatch.setitem(sys.modules, "test_registry_home", sys.modules[__name__])
    for name in ("alpha", "beta"):
        (package / f"{name}.py").write_text(
            "from test_registry_home import Base, REGISTRY\n"
            f"@REGISTRY.register({name!r})\nclass Thing(Base):\n    summary = 'the {name} thing'\n"
        )
    (package / "_helpers.py").write_text("raise RuntimeError('a private module is not a plug-in')\n")
    monkeypatch.setattr(sys.modules[__name__], "REGISTRY", registry, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.get("beta").summary == "the beta thing"
    assert registry.names() == ["alpha", "beta"]
    assert registry.describe("alpha") == "alpha (default; the alpha thing), beta (the beta thing)"
    with pytest.raises(RegistryError, match="unknown thing 'gamma'; available: alpha, beta"):
        registry.get("gamma")
