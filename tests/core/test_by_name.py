"""Objects named by text (core/by_name.py): one spelling rule for provider classes, processors
and PySpark's own classes, and errors that name the path and what is wrong with it."""

from __future__ import annotations

import pytest

from pyspark_dstl.core.by_name import load_by_name, split_name
from pyspark_dstl.core.errors import ConfigError


@pytest.mark.parametrize("path", ["pyspark_dstl.core.errors.ConfigError",
                                  "pyspark_dstl.core.errors:ConfigError"])
def test_both_separators_name_the_same_class(path: str) -> None:
    assert load_by_name(path, "class", ConfigError) is ConfigError


@pytest.mark.parametrize("path", ["ConfigError", ":ConfigError", "errors:", "a:b:c", "a."])
def test_a_name_without_module_and_attribute_is_refused(path: str) -> None:
    assert split_name(path) is None
    with pytest.raises(ConfigError, match=rf"^processor {path!r} is not a 'module.Class' or "
                                          rf"'module:Class' path$"):
        load_by_name(path, "processor", ConfigError)


def test_a_missing_module_or_attribute_is_named() -> None:
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_module_here'"):
        load_by_name("no_such_module_here:Thing", "processor", ConfigError)
    with pytest.raises(ConfigError, match=r"module 'pyspark_dstl.core.errors' has no 'Nope'"):
        load_by_name("pyspark_dstl.core.errors:Nope", "processor", ConfigError)


def test_an_optional_module_that_cannot_be_imported_gives_none() -> None:
    assert load_by_name("no_such_module_here:Thing", "class", ConfigError,
                        if_importable=True) is None
    with pytest.raises(ConfigError, match="has no 'Nope'"):
        load_by_name("pyspark_dstl.core.errors:Nope", "class", ConfigError, if_importable=True)
