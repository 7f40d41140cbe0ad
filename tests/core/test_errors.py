"""`excerpt`: what an error may quote of untrusted content is short, whatever the content."""

from __future__ import annotations

import msgpack
import pytest

from pyspark_dstl.core.errors import EXCERPT_CHARS, excerpt


def test_an_unpacker_error_carrying_everything_it_read_is_cut_short() -> None:
    with pytest.raises(msgpack.ExtraData) as caught:
        msgpack.unpackb(bytes(10**6))
    text = excerpt(caught.value)
    assert text.startswith("ExtraData: 0, b'\\x00") and len(text) < EXCERPT_CHARS + 40


@pytest.mark.parametrize("value", [b"x" * 10**6, "y" * 10**6, list(range(10**6)),
                                   [b"z" * 10**6] * 3, {"k": "v" * 10**6}])
def test_large_values_are_quoted_in_a_few_hundred_characters(value: object) -> None:
    assert len(excerpt(value)) < EXCERPT_CHARS + 40


def test_small_values_are_quoted_as_repr_does() -> None:
    assert excerpt("agg/0") == "'agg/0'"
    assert excerpt(ValueError("bad thing")) == "ValueError: bad thing"


def test_every_error_the_facade_exports_derives_from_the_one_root() -> None:
    import pyspark_dstl
    from pyspark_dstl.backend.faults import KillPointError

    exported = [getattr(pyspark_dstl, name) for name in pyspark_dstl.__all__
                if name.endswith("Error")]
    assert len(exported) >= 12
    assert all(issubclass(error, pyspark_dstl.DstlError) for error in [*exported,
                                                                         KillPointError])


def test_every_error_class_the_library_defines_is_exported_from_the_facade() -> None:
    import importlib
    import inspect
    import pkgutil

    import pyspark_dstl

    defined = set()
    for module_info in pkgutil.walk_packages(pyspark_dstl.__path__, "pyspark_dstl."):
        if module_info.name.endswith((".__main__", ".cli")):
            continue  # entry points (importing __main__ runs the tool); they define no error
        module = importlib.import_module(module_info.name)
        defined |= {name for name, value in vars(module).items()
                    if inspect.isclass(value) and issubclass(value, pyspark_dstl.DstlError)
                    and value.__module__ == module.__name__}
    assert len(defined) >= 60
    assert sorted(name for name in defined if not hasattr(pyspark_dstl, name)) == []
