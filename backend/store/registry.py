"""Providers are chosen by class path, like Spark's stateStore.providerClass."""

from __future__ import annotations

from pyspark_dstl.backend.backend_errors import ProviderError
from pyspark_dstl.backend.store.api import StateStoreProvider
from pyspark_dstl.core.by_name import load_by_name


def load_provider_class(path: str) -> type[StateStoreProvider]:
    """The StateStoreProvider subclass at "package.module.Class"; ProviderError naming it."""
    cls = load_by_name(path, "provider class", ProviderError)
    if not isinstance(cls, type) or not issubclass(cls, StateStoreProvider):
        raise ProviderError(f"provider class {path!r} is not a StateStoreProvider subclass")
    if getattr(cls, "__abstractmethods__", None):
        raise ProviderError(f"provider class {path!r} is abstract "
                            f"(missing {sorted(cls.__abstractmethods__)})")
    return cls
