"""The import root: one `pyspark_dstl` over the top-level folders, nothing else installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pyspark_dstl
from tests.support.paths import REPO_ROOT

ROOTS = {"core": "pyspark_dstl.core", "changelog": "pyspark_dstl.changelog",
         "materializer": "pyspark_dstl.materializer", "backend": "pyspark_dstl.backend",
         "spark": "pyspark_dstl.spark"}


def _setuptools() -> dict:
    with open(REPO_ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["tool"]["setuptools"]


def test_every_package_folder_is_listed_under_the_import_root() -> None:
    found = {"pyspark_dstl"}
    for folder, name in ROOTS.items():
        for init in sorted((REPO_ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(REPO_ROOT / folder)
            found.add(".".join([name, *relative.parts]))
    assert set(_setuptools()["packages"]) == found


def test_package_dir_maps_each_room_to_its_top_level_folder() -> None:
    assert _setuptools()["package-dir"] == {"": "data_sources", "pyspark_dstl": "pyspark_dstl",
                                            **{name: folder for folder, name in ROOTS.items()}}


def test_the_only_top_level_modules_are_the_data_source_entries_of_pyspark_dstl() -> None:
    """PySpark's lookup registers one `DefaultSource` per top-level `pyspark_*` module: each
    further source name needs a module of its own, and nothing else is installed there."""
    modules = _setuptools()["py-modules"]
    assert sorted(modules) == sorted(path.stem for path in
                                     (REPO_ROOT / "data_sources").glob("*.py"))
    assert all(name.startswith("pyspark_dstl_") for name in modules)


def test_checkout_links_mirror_the_package_dir_mapping() -> None:
    for folder in ROOTS:
        link = REPO_ROOT / "pyspark_dstl" / folder
        assert link.is_symlink() and link.resolve() == (REPO_ROOT / folder).resolve()


def test_no_top_level_changelog_backend_or_materializer_is_importable_from_elsewhere(
        tmp_path: Path) -> None:
    code = ("import importlib.util as u, sys; "
            "print([n for n in ('changelog', 'backend', 'materializer', 'core') "
            "if u.find_spec(n) is not None])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={"PATH": ""})
    assert out.stdout.strip() == "[]"


def test_facade_imports_without_pyspark_and_exports_the_error_root(tmp_path: Path) -> None:
    code = ("import sys, pyspark_dstl; "
            "print('pyspark' in sys.modules, pyspark_dstl.DstlError.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={"PATH": ""})
    assert out.stdout.split() == ["False", "DstlError"]


def test_every_package_error_root_derives_from_dstl_error() -> None:
    from pyspark_dstl.backend.backend_errors import BackendError
    from pyspark_dstl.changelog.changelog_errors import ChangelogError
    from pyspark_dstl.materializer.materializer_errors import MaterializerError

    for root in (BackendError, ChangelogError, MaterializerError, pyspark_dstl.ConfigError):
        assert issubclass(root, pyspark_dstl.DstlError)
