"""Providers are chosen by class path, like Spark's stateStore.providerClass."""

from __future__ import annotations

import importlib

from pyspark_dstl.backend.backend_errors import ProviderError
from pyspark_dstl.backend.store.api import StateStoreProvider


def load_provider_class(path: str) -> type[StateStoreProvider]:
    """The StateStoreProvider subclass at "package.module.Class"; ProviderError naming it."""
    module_name, _, class_name = str(path).rpartition(".")
    if not module_name or not class_name:
        raise ProviderError(f"provider class {path!r} is not a 'module.Class' path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProviderError(f"provider class {path!r}: cannot import module "
                            f"{module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ProviderError(f"provider class {path!r}: module {module_name!r} has no "
                            f"{class_name!r}")
    if not isinstance(cls, type) or not issubclass(cls, StateStoreProvider):
        raise ProviderError(f"provider class {path!r} is not a StateStoreProvider subclass")
    if getattr(cls, "__abstractmethods__", None):
        raise ProviderError(f"provider class {path!r} is abstract "
                            f"(missing {sorted(cls.__abstractmethods__)})")
    return cls
