"""docs/configuration.md is generated from the option declarations of all four packages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.configuration_page import COMMAND, main, render
from pyspark_dstl.core.settings import Settings, env_name, subsections, walk_settings
from pyspark_dstl.spark.query_settings import QuerySettings
from tests.support.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "configuration.md"


def every_key() -> list[str]:
    return [key for options in (BackendSettings, QuerySettings)
            for key, _, _ in walk_settings(options)]


def test_docs_configuration_md_matches_the_declarations() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is stale: regenerate it with `{COMMAND}` "
        "from the repository root")


def test_every_key_spark_reads_is_on_the_page() -> None:
    page = render()
    missing = [key for key in every_key() if f"| `{key}` (" not in page]
    assert missing == []


def test_no_two_keys_share_an_environment_variable() -> None:
    names = Counter(env_name(key) for key in every_key())
    assert [name for name, count in names.items() if count > 1] == []


def nested_sections(options: type[Settings]) -> Iterator[tuple[str, type[Settings]]]:
    """(prefix the parent reads it under, nested class) of every nested section, recursively."""
    for key, nested in subsections(options).values():
        yield options.SECTION.prefix + key, nested
        yield from nested_sections(nested)


def test_a_nested_section_sits_where_its_own_class_says() -> None:
    """A nested class's default prefix is the one its parent reads it under, so the key its
    errors name is the key a user wrote."""
    pairs = list(nested_sections(BackendSettings))
    assert len(pairs) == 4  # changelog, its s3 storage, materialization, fencing
    assert [(prefix, nested.SECTION.prefix) for prefix, nested in pairs
            if prefix != nested.SECTION.prefix] == []


def test_check_mode_fails_on_a_stale_page_naming_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "configuration.md"
    page.write_text("# old\n", encoding="utf-8")
    assert main(["--check", str(page)]) == 1
    assert COMMAND in capsys.readouterr().err


def test_the_written_page_passes_the_check(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    assert main([str(page)]) == 0
    assert main(["--check", str(page)]) == 0
