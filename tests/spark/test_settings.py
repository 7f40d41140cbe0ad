"""spark.dstl.* settings: parsing, precedence and errors that name the key (no Spark)."""

from __future__ import annotations

import pytest

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.query_settings import DstlSettings


def test_session_settings_and_per_query_overrides_combine() -> None:
    conf = DstlSettings.resolve(
        {"spark.dstl.changelog.persistDelay": "5ms", "spark.dstl.query.partitions": "8",
         "spark.sql.shuffle.partitions": "3"},
        {"query.partitions": 2, "materialization.everyNCommits": "4",
         "spark.dstl.changelog.hedging.enabled": False})
    assert conf.query.partitions == 2
    assert conf.backend.changelog.persist_delay == pytest.approx(0.005)
    assert conf.backend.changelog.hedging_enabled is False
    assert conf.backend.materialization.every_n_commits == 4
    assert "spark.sql.shuffle.partitions" not in conf.settings


def test_executors_get_backend_settings_only() -> None:
    conf = DstlSettings.resolve({"spark.dstl.query.checkpointLocation": "/tmp/x",
                             "spark.dstl.stateStore.minBatchesToRetain": "5"})
    assert conf.backend_settings == {"spark.dstl.stateStore.minBatchesToRetain": "5"}
    assert conf.backend.min_batches_to_retain == 5


@pytest.mark.parametrize(("key", "value"), [
    ("spark.dstl.changelog.persistDelay", "soon"),
    ("spark.dstl.materialization.everyNCommits", "many"),
    ("spark.dstl.stateStore.minBatchesToRetain", "0"),
    ("spark.dstl.query.partitions", "0"),
    ("spark.dstl.query.outputMode", "stream"),
    ("spark.dstl.query.nope", "1"),
    ("spark.dstl.nope", "1"),
])
def test_invalid_setting_fails_naming_its_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        DstlSettings.resolve({key: value})


def test_local_paths_become_file_urls() -> None:
    assert to_url("/data/ckpt/").startswith("file:///data/ckpt")
    assert to_url("s3://bucket/root/") == "s3://bucket/root"


def test_hadoops_one_slash_file_url_is_a_local_path() -> None:
    assert to_url("file:/data/ckpt") == "file:///data/ckpt"


def test_a_url_with_one_slash_after_its_scheme_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"write s3://bucket/root$"):
        to_url("s3:/bucket/root")


def test_engine_checkpoint_of_a_remote_checkpoint_must_be_given() -> None:
    assert default_engine_checkpoint("file:///data/ckpt") == "file:///data/ckpt/engine"
    with pytest.raises(ConfigError, match="engineCheckpointLocation"):
        default_engine_checkpoint("s3://bucket/root")
