"""Settings declared once (core.settings): parsing each kind, bounds, unknown keys, environment
variables and the documentation table, on a small options class of the tests' own plus the real
ChangelogSettings where the wording users see matters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    OPTIONAL_DURATION,
    OPTIONAL_INT,
    OPTIONAL_TEXT,
    SIZE,
    TEXT,
    WORD,
    Rule,
    Section,
    Settings,
    env_name,
    markdown_table,
    read_settings,
    setting,
    setting_keys,
    show_duration,
    show_size,
    subsection,
)

P = "spark.test.pool."


@dataclass(frozen=True)
class RetryPart(Settings):
    SECTION = Section(P + "retry.", "retry")

    attempts: int = setting("attempts", INT, 3, "Attempts per call.", at_least=1)


@dataclass(frozen=True)
class PoolSettings(Settings):
    SECTION = Section(P, "pool")

    enabled: bool = setting("enabled", BOOL, True, "Whether the pool is used.")
    size: int = setting("size", INT, 4, "Connections.", above=0, at_most=64)
    share: float = setting("share", FLOAT, 0.5, "Share of the pool for reads.", above=0,
                           below=1)
    name: str = setting("name", TEXT, "main", "Pool name.",
                        rule=Rule("be free of '/'", lambda text: "/" not in text))
    mode: str = setting("mode", WORD, "lazy", "Connect mode.", choices=("lazy", "eager"))
    wait: float = setting("wait", DURATION, 0.25, "Longest wait.", at_least=0)
    buffer: int = setting("buffer", SIZE, 2 * 1024 * 1024, "Buffer per connection.", above=0)
    idle: float | None = setting("idle", OPTIONAL_DURATION, 60.0, "Idle close.", above=0)
    spare: int | None = setting("spare", OPTIONAL_INT, None, "Spare connections.", at_least=0)
    label: str | None = setting("label", OPTIONAL_TEXT, None, "Free label.")
    floor: float = setting("floor", DURATION, 0.0, "Least wait.", at_least=0)
    retry: RetryPart = subsection(RetryPart, "retry.")

    def check_together(self) -> None:
        if self.wait < self.floor:
            raise ConfigError(f"{self.key_of('wait')}: must not be below "
                              f"{self.key_of('floor')}, got {self.wait!r}")


@pytest.mark.parametrize(("key", "raw", "field", "expected"), [
    ("enabled", "off", "enabled", False),
    ("size", " 7 ", "size", 7),
    ("share", "0.25", "share", 0.25),
    ("name", "  side  ", "name", "side"),
    ("mode", "EAGER", "mode", "eager"),
    ("wait", "250ms", "wait", 0.25),
    ("buffer", "3MB", "buffer", 3 * 1024 * 1024),
    ("idle", "2min", "idle", 120.0),
    ("idle", "off", "idle", None),
    ("spare", "none", "spare", None),
    ("spare", "2", "spare", 2),
    ("label", "", "label", None),
    ("retry.attempts", "5", "retry", RetryPart(attempts=5)),
], ids=lambda value: repr(value))
def test_each_kind_reads_its_spark_spelling(key: str, raw: str, field: str,
                                            expected: Any) -> None:
    assert getattr(PoolSettings.from_mapping({P + key: raw}), field) == expected


def test_python_values_are_read_like_their_spark_spelling() -> None:
    assert PoolSettings.from_mapping({P + "enabled": False, P + "size": 9, P + "wait": 1.5,
                                  P + "spare": None}) == PoolSettings(
        enabled=False, size=9, wait=1.5, spare=None)


def test_keys_outside_the_prefix_are_not_read() -> None:
    assert PoolSettings.from_mapping({"spark.other.size": "x", "spark.test.poolsize": "1"}) == \
        PoolSettings()


@pytest.mark.parametrize(("key", "raw"), [
    ("enabled", "maybe"), ("size", "many"), ("share", "half"), ("name", "   "),
    ("wait", "soon"), ("buffer", "lots"), ("idle", "later"), ("spare", "some"),
])
def test_a_value_that_is_not_of_the_kind_fails_naming_the_key(key: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(P + key)}: "):
        PoolSettings.from_mapping({P + key: raw})


@pytest.mark.parametrize(("key", "raw", "message"), [
    ("size", "0", "must be above 0 and at most 64, got 0"),
    ("size", "65", "must be above 0 and at most 64, got 65"),
    ("share", "1", "must be between 0 and 1 (exclusive), got 1.0"),
    ("idle", "0s", "must be positive, got 0.0"),
    ("spare", "-1", "must not be negative, got -1"),
    ("mode", "busy", "must be one of lazy, eager, got 'busy'"),
    ("name", "a/b", "must be free of '/', got 'a/b'"),
    ("retry.attempts", "0", "must be at least 1, got 0"),
])
def test_bounds_come_from_the_declaration(key: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{P}{key}: ") + ".*" + re.escape(message)):
        PoolSettings.from_mapping({P + key: raw})


def test_an_error_message_starts_with_the_full_key() -> None:
    with pytest.raises(ConfigError) as caught:
        ChangelogSettings.from_mapping({"spark.dstl.changelog.hedging.quantile": "1.5"})
    assert str(caught.value) == ("spark.dstl.changelog.hedging.quantile: must be between 0 "
                                 "and 1 (exclusive), got 1.5")


def test_a_value_built_in_code_is_held_to_the_same_bounds() -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(P)}size: must be above 0"):
        PoolSettings(size=0)


def test_a_value_built_in_code_must_have_the_kind_s_type() -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(P)}wait: expected a duration"):
        PoolSettings(wait="10ms")  # type: ignore[arg-type]


def test_with_changes_checks_the_new_values() -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(P)}mode: "):
        PoolSettings().with_changes(mode="busy")


def test_a_rule_between_fields_names_the_key_under_the_prefix_being_read() -> None:
    with pytest.raises(ConfigError, match=r"^elsewhere\.wait: must not be below elsewhere\.floor"):
        PoolSettings.from_mapping({"elsewhere.floor": "1s", "elsewhere.wait": "10ms"}, "elsewhere.")


def test_an_unknown_key_fails_naming_it_and_the_known_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        PoolSettings.from_mapping({P + "sise": "3"})
    message = str(caught.value)
    assert message.startswith(f"{P}sise: unknown pool setting (known: ")
    assert f"{P}size" in message and f"{P}retry.*" in message


def test_keys_of_other_sections_are_left_to_their_owners() -> None:
    assert PoolSettings.from_mapping({P + "stats.enabled": "1"}, other_sections=["stats."]) == \
        PoolSettings()


def test_base_supplies_the_values_that_are_not_given() -> None:
    base = PoolSettings(size=9, retry=RetryPart(attempts=7))
    read = PoolSettings.from_mapping({P + "mode": "eager"}, base=base)
    assert (read.size, read.mode, read.retry.attempts) == (9, "eager", 7)


def test_conf_keys_name_every_key_by_attribute_path() -> None:
    keys = setting_keys(PoolSettings)
    assert keys["buffer"] == "buffer" and keys["retry.attempts"] == "retry.attempts"
    assert len(keys) == 12


def test_the_environment_name_of_a_key_is_upper_case_with_underscores() -> None:
    assert env_name("spark.dstl.changelog.persistDelay") == "SPARK_DSTL_CHANGELOG_PERSISTDELAY"


def test_environment_variables_are_read_after_their_keys() -> None:
    env = {"SPARK_TEST_POOL_SIZE": "12", "SPARK_TEST_POOL_RETRY_ATTEMPTS": "2", "HOME": "/x"}
    read = PoolSettings.from_mapping({}, env=env)
    assert (read.size, read.retry.attempts) == (12, 2)


def test_a_key_in_the_mapping_wins_over_its_environment_variable() -> None:
    read = PoolSettings.from_mapping({P + "size": "5"}, env={"SPARK_TEST_POOL_SIZE": "12"})
    assert read.size == 5


def test_an_unknown_environment_variable_of_the_section_fails_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"^SPARK_TEST_POOL_SISE: unknown pool environment"):
        PoolSettings.from_mapping({}, env={"SPARK_TEST_POOL_SISE": "3"})


def test_environment_variables_of_other_sections_are_left_alone() -> None:
    read = read_settings(PoolSettings, {}, env={"SPARK_TEST_POOL_STATS_ON": "1"},
                        other_sections=["stats."])
    assert read == PoolSettings()


def test_a_bad_environment_value_names_the_key_it_stands_for() -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(P)}wait: "):
        PoolSettings.from_mapping({}, env={"SPARK_TEST_POOL_WAIT": "soon"})


def test_a_declaration_needs_a_doc() -> None:
    with pytest.raises(TypeError, match="'size': needs a one-line doc"):
        setting("size", INT, 4)


def test_a_factory_default_needs_a_shown_default() -> None:
    with pytest.raises(TypeError, match="'dir': a factory default needs shown_default"):
        setting("dir", TEXT, factory=lambda: "/tmp", doc="Where.")


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.0, "0s"), (0.01, "10ms"), (0.25, "250ms"), (2.0, "2s"), (90.0, "90s"), (600.0, "10min"),
    (7200.0, "2h"), (1.5, "1.5s")])
def test_a_duration_is_shown_in_its_shortest_exact_spelling(seconds: float, shown: str) -> None:
    assert show_duration(seconds) == shown


@pytest.mark.parametrize(("size", "shown"), [
    (1024 * 1024 * 1024, "1GB"), (64 * 1024 * 1024, "64MB"), (1536, "1536 bytes"),
    (2048, "2KB")])
def test_a_size_is_shown_in_its_largest_exact_unit(size: int, shown: str) -> None:
    assert show_size(size) == shown


def test_the_table_shows_key_type_default_bounds_and_doc() -> None:
    rows = markdown_table(PoolSettings).splitlines()
    assert rows[0] == "| key | type | default | allowed | meaning |"
    assert (f"| `{P}buffer` (`buffer`) | size | `2MB` | positive | Buffer per connection. |"
            in rows)
    assert f"| `{P}spare` (`spare`) | integer or `off` | unset | not negative | " \
           "Spare connections. |" in rows
    assert not any("attempts" in row for row in rows)  # nested sections get their own table
