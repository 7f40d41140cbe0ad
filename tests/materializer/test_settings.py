"""MaterializerSettings: defaults, validation, and Spark-style conf parsing."""

from __future__ import annotations

import pytest

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.materializer import MaterializerSettings
from pyspark_dstl.materializer.materializer_settings import MATERIALIZER_SETTING_KEYS

PREFIX = "spark.dstl.materialization."


def test_defaults_follow_the_design() -> None:
    options = MaterializerSettings()
    assert options.interval == 600.0
    assert options.every_n_commits == 10
    assert options.max_consecutive_failures == 3
    assert options.backstop_bytes == 512 * 1024 * 1024
    assert (options.worker_threads, options.upload_parallelism,
            options.restore_parallelism) == (2, 4, 8)
    assert options.cache_dir is None


def test_from_conf_parses_durations_sizes_and_counts() -> None:
    options = MaterializerSettings.from_mapping({
        PREFIX + "interval": "90s",
        PREFIX + "everyNCommits": "25",
        PREFIX + "maxConsecutiveFailures": "5",
        PREFIX + "backstopSize": "64MB",
        PREFIX + "workerThreads": "3",
        PREFIX + "uploadParallelism": "6",
        PREFIX + "restoreParallelism": "12",
        PREFIX + "cacheDir": "cache/snapshots",
        "spark.dstl.changelog.persistDelay": "5ms",  # other prefixes are ignored
    })
    assert options == MaterializerSettings(
        interval=90.0, every_n_commits=25, max_consecutive_failures=5,
        backstop_bytes=64 * 1024 * 1024, worker_threads=3, upload_parallelism=6,
        restore_parallelism=12, cache_dir="cache/snapshots")


@pytest.mark.parametrize("key", ["interval", "everyNCommits"])
def test_from_conf_off_switches_a_trigger(key: str) -> None:
    options = MaterializerSettings.from_mapping({PREFIX + key: "off"})
    field = {v: k for k, v in MATERIALIZER_SETTING_KEYS.items()}[key]
    assert getattr(options, field) is None


def test_from_conf_rejects_unknown_key_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"spark\.dstl\.materialization\.intervall"):
        MaterializerSettings.from_mapping({PREFIX + "intervall": "1s"})


@pytest.mark.parametrize(("key", "raw"), [
    ("interval", "soon"), ("everyNCommits", "ten"), ("backstopSize", "lots"),
    ("workerThreads", "0"), ("interval", "0s"), ("everyNCommits", "0"),
])
def test_from_conf_rejects_bad_value_naming_the_key(key: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=PREFIX.replace(".", r"\.") + key):
        MaterializerSettings.from_mapping({PREFIX + key: raw})


def test_invalid_field_names_its_conf_key() -> None:
    with pytest.raises(ConfigError, match="uploadParallelism"):
        MaterializerSettings(upload_parallelism=0)


def test_options_are_frozen() -> None:
    options = MaterializerSettings()
    with pytest.raises(AttributeError):
        options.interval = 1.0  # type: ignore[misc]
