"""Names a package exports, imported on first use (PEP 562): importing the package stays light,
and using one name loads only the module that defines it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


def load_lazy_name(package: str, names: Mapping[str, str], name: str,
                   aliases: Mapping[str, str] | None = None) -> Any:
    """For a package's `__getattr__`: `name` from the module `names` maps it to (under the name
    `aliases` gives, if any), kept in the package so later uses skip this."""
    module = names.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), (aliases or {}).get(name, name))
    setattr(sys.modules[package], name, value)
    return value


def by_module(groups: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """name -> module, from module -> the names it defines (a package's table, by module)."""
    return {name: module for module, names in groups.items() for name in names}
