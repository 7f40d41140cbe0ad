"""Objects named by text: a provider class in a setting, a processor on the command line.

One spelling rule for all of them: `module:attribute` (as entry points write it) or
`package.module.attribute` (as Spark's class settings write it)."""

from __future__ import annotations

import importlib
from typing import Any


def split_name(path: str) -> tuple[str, str] | None:
    """(module, attribute) of `module:attribute` or `module.attribute`; None if it is neither."""
    text = str(path)
    module_name, sep, attribute = text.partition(":") if ":" in text else text.rpartition(".")
    if not sep or not module_name or not attribute or ":" in attribute:
        return None
    return module_name, attribute


def load_by_name(path: str, what: str, error: type[Exception], *,
                 if_importable: bool = False) -> Any:
    """The object `path` names; `error` naming `what` and `path` when it cannot be found. With
    `if_importable`, None when its module cannot be imported (an optional part missing)."""
    parts = split_name(path)
    if parts is None:
        raise error(f"{what} {path!r} is not a 'module.Class' or 'module:Class' path")
    module_name, attribute = parts
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if if_importable:
            return None
        raise error(f"{what} {path!r}: cannot import module {module_name!r}: {exc}") from exc
    found = getattr(module, attribute, None)
    if found is None:
        raise error(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
    return found
