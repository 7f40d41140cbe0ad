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


def defined_exception_classes() -> dict[str, type[BaseException]]:
    """Qualified name -> class of every exception (warnings included) a module of the
    package defines, private ones too."""
    import importlib
    import inspect
    import pkgutil

    import pyspark_dstl

    defined: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(pyspark_dstl.__path__, "pyspark_dstl."):
        if module_info.name.endswith((".__main__", ".cli")):
            continue  # entry points (importing __main__ runs the tool); they define no error
        module = importlib.import_module(module_info.name)
        defined.update({f"{module.__name__}.{name}": value
                        for name, value in vars(module).items()
                        if inspect.isclass(value) and issubclass(value, BaseException)
                        and value.__module__ == module.__name__})
    return defined


def test_every_exception_class_the_library_defines_derives_from_dstl_error() -> None:
    from pyspark_dstl import DstlError

    errors = {name: cls for name, cls in defined_exception_classes().items()
              if not issubclass(cls, Warning)}
    assert len(errors) >= 60
    assert sorted(name for name, cls in errors.items() if not issubclass(cls, DstlError)) == []


def test_every_warning_class_the_library_defines_derives_from_dstl_warning() -> None:
    from pyspark_dstl import DstlWarning

    warnings = {name: cls for name, cls in defined_exception_classes().items()
                if issubclass(cls, Warning)}
    assert {name.rpartition(".")[2] for name in warnings} >= {"NonAtomicStorageWarning",
                                                              "StaleInstallWarning"}
    assert sorted(name for name, cls in warnings.items()
                  if not issubclass(cls, DstlWarning)) == []
    assert issubclass(DstlWarning, UserWarning)


def test_every_public_error_and_warning_class_is_exported_from_the_facade() -> None:
    import pyspark_dstl

    public = {name.rpartition(".")[2] for name in defined_exception_classes()
              if not name.rpartition(".")[2].startswith("_")}
    assert sorted(name for name in public if not hasattr(pyspark_dstl, name)) == []
