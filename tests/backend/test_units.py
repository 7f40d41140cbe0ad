"""Small parts of the backend: names, records, checkpoint infos, options, class paths."""

from __future__ import annotations

import json
import os

import pytest

from pyspark_dstl.backend.backend_errors import (
    CorruptCheckpointError,
    LineageError,
    ProviderError,
    StoreIdError,
)
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.engines.records import (
    OP_DELETE,
    OP_PUT,
    VersionMarker,
    cf_prefix,
    decode_payload,
    encode_changes,
    encode_key,
    encode_payload,
)
from pyspark_dstl.backend.lineage.naming import (
    CheckpointName,
    make_store_id,
    parse_checkpoint_name,
    split_store_id,
)
from pyspark_dstl.backend.lineage.rules import MarkerCheck
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.memory_provider import InMemoryProvider
from pyspark_dstl.backend.store.registry import load_provider_class
from pyspark_dstl.backend.store.rocksdb_provider import RocksDBChangelogProvider
from pyspark_dstl.backend.store.txcache import TransactionCache
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle
from tests.support.backend import BackendEnv, env  # noqa: F401 - fixture


@pytest.mark.parametrize("operator", ["", "a/b", "..", "x..y", "tab\there", "back\\slash"])
def test_operator_names_that_could_escape_a_store_directory_are_rejected(operator: str) -> None:
    with pytest.raises(StoreIdError, match="operator name"):
        make_store_id(operator, 0)


def test_a_store_id_splits_back_into_operator_and_partition() -> None:
    assert split_store_id(make_store_id("dedup by key", 17)) == ("dedup by key", 17)


@pytest.mark.parametrize("store_id", ["agg", "agg/x", "agg/-1", "agg/01", "/3"])
def test_a_malformed_store_id_is_named_in_the_error(store_id: str) -> None:
    with pytest.raises(StoreIdError, match=repr(store_id).replace("/", ".")[1:-1]):
        split_store_id(store_id)


def test_checkpoint_file_names_tell_version_id_part_and_kind() -> None:
    assert parse_checkpoint_name("state/a/0/12_ab12.changelog") == CheckpointName(
        12, "ab12", "changelog", 0)
    assert parse_checkpoint_name("12_ab12.3.changelog") == CheckpointName(
        12, "ab12", "changelog", 3)
    assert parse_checkpoint_name("7_cd.snapshot") == CheckpointName(7, "cd", "snapshot", 0)
    for other in ("12_ab.zip", "012_ab.changelog", "12ab.changelog", "sst/0001-x.sst"):
        assert parse_checkpoint_name(other) is None


def test_a_column_family_name_holding_the_separator_is_rejected() -> None:
    with pytest.raises(StoreIdError, match="without NUL"):
        encode_key("a\x00b", b"c")


def test_keys_of_one_column_family_never_fall_under_anothers_prefix() -> None:
    assert not encode_key("ab", b"x").startswith(cf_prefix("a"))
    assert not encode_key("a", b"bx").startswith(cf_prefix("ab"))


def test_a_payload_carries_its_version_marker_and_records() -> None:
    marker = VersionMarker(5, "uid5", "uid4")
    payload = encode_payload(marker, [(OP_PUT, "cf", b"k", b"v"), (OP_DELETE, "cf", b"d", None)])
    assert decode_payload(payload, "here") == (
        marker, [(OP_PUT, "cf", b"k", b"v"), (OP_DELETE, "cf", b"d", None)])


def test_a_payload_without_a_version_marker_is_corrupt() -> None:
    import msgpack
    with pytest.raises(CorruptCheckpointError, match="here: change payload does not start"):
        decode_payload(msgpack.packb([[OP_PUT, "cf", b"k", b"v"]]), "here")


def _info(version: int = 3, lineage: tuple[tuple[int, str], ...] | None = None,
          materialized: MaterializedHandle | None = None) -> StoreCommit:
    handle = ChangelogHandle.of("op/1", 4, 6, [Segment(4, 6, "state/op/1/3_c.changelog", 9, 80)])
    return StoreCommit("op/1", version, "c", "b", handle, materialized,
                          lineage if lineage is not None else ((3, "c"),), (3, "c"))


def test_a_checkpoint_info_survives_json() -> None:
    snapshot = MaterializedHandle("op/1", 2, "b", 4, "state/op/1/2_b.snapshot", 100, 10, 3)
    info = _info(materialized=snapshot)
    assert StoreCommit.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_a_checkpoint_info_with_a_gap_in_its_lineage_is_rejected() -> None:
    with pytest.raises(CorruptCheckpointError, match=r"lineage versions \[3\] should be"):
        _info(version=3, lineage=((3, "c"),), materialized=None)


def test_a_checkpoint_info_of_another_format_version_is_rejected() -> None:
    snapshot = MaterializedHandle("op/1", 2, "b", 4, "state/op/1/2_b.snapshot", 100, 10, 3)
    data = _info(materialized=snapshot).to_dict() | {"format_version": 2}
    with pytest.raises(CorruptCheckpointError, match="format version 2"):
        StoreCommit.from_dict(data)


def test_options_come_from_spark_conf_and_hand_sections_to_their_owners() -> None:
    options = BackendSettings.from_mapping({
        "spark.dstl.stateStore.minBatchesToRetain": "7",
        "spark.dstl.stateStore.txCache.maxSize": "8MB",
        "spark.dstl.rocksdb.writeBufferSize": "16m",
        "spark.dstl.changelog.persistDelay": "20ms",
        "spark.dstl.materialization.everyNCommits": "4",
        "spark.sql.shuffle.partitions": "8",
    })
    assert options.min_batches_to_retain == 7
    assert options.tx_cache_max_bytes == 8 * 1024 * 1024
    assert options.write_buffer_size == 16 * 1024 * 1024
    assert options.changelog.persist_delay == pytest.approx(0.02)
    assert options.materialization.every_n_commits == 4


@pytest.mark.parametrize("key", ["spark.dstl.stateStore.minBatches",
                                 "spark.dstl.changelog.persistDelayy",
                                 "spark.dstl.query.name"])
def test_an_unknown_setting_is_named(key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BackendSettings.from_mapping({key: "1"})


def test_settings_of_other_components_can_be_left_to_them() -> None:
    options = BackendSettings.from_mapping({"spark.dstl.query.name": "x"},
                                       other_sections=["query."])
    assert options == BackendSettings(local_dir=options.local_dir)


def test_an_invalid_setting_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"spark\.dstl\.stateStore\.minBatchesToRetain"):
        BackendSettings.from_mapping({"spark.dstl.stateStore.minBatchesToRetain": "0"})


def test_providers_load_by_class_path() -> None:
    rocksdb = "pyspark_dstl.backend.store.rocksdb_provider.RocksDBChangelogProvider"
    memory = "pyspark_dstl.backend.store.memory_provider.InMemoryProvider"
    assert load_provider_class(rocksdb) is RocksDBChangelogProvider
    assert load_provider_class(memory) is InMemoryProvider


@pytest.mark.parametrize("path,why", [
    ("RocksDB", "not a 'module.Class' or 'module:Class' path"),
    ("backend.no_such_module.Provider", "cannot import module"),
    ("pyspark_dstl.backend.store.rocksdb_provider.NoSuchClass", "has no 'NoSuchClass'"),
    ("pyspark_dstl.backend.backend_errors.BackendError", "not a StateStoreProvider subclass"),
    ("pyspark_dstl.backend.store.provider.ChangelogProvider", "is abstract"),
])
def test_a_bad_provider_class_path_is_named(path: str, why: str) -> None:
    with pytest.raises(ProviderError, match=f"{path!r}.*{why}".replace("(", r"\(")):
        load_provider_class(path)


def test_the_transaction_cache_keeps_one_entry_per_key() -> None:
    cache = TransactionCache(max_entries=10, max_bytes=1 << 20)
    cache.put("cf", b"k", b"1")
    cache.put("cf", b"k", b"2")
    cache.remove("cf", b"gone")
    cache.put("other", b"k", b"3")
    assert cache.lookup("cf", b"k") == (True, b"2")
    assert cache.lookup("cf", b"gone") == (True, None)
    assert cache.lookup("cf", b"never") == (False, None)
    assert [record for _, record in cache.drain()] == [
        (OP_PUT, "cf", b"k", b"2"), (OP_DELETE, "cf", b"gone", None),
        (OP_PUT, "other", b"k", b"3")]
    assert len(cache) == 0 and cache.size_bytes == 0


def test_markers_may_repeat_within_one_commit_and_must_chain() -> None:
    check = MarkerCheck("op/1", (2, "b"), [(3, "c"), (4, "d")])
    for marker in (VersionMarker(3, "c", "b"), VersionMarker(3, "c", "b"),
                   VersionMarker(4, "d", "c")):
        check.check(marker, "here")
    check.finish("here")


@pytest.mark.parametrize("marker,message", [
    (VersionMarker(4, "d", "c"), "expected version 3 id 'c' built on 'b'"),
    (VersionMarker(3, "c", "x"), "built on 'x'; expected version 3"),
    (VersionMarker(3, "z", "b"), "id 'z' built on 'b'; expected version 3 id 'c'"),
])
def test_a_marker_off_the_expected_lineage_is_a_lineage_error(marker: VersionMarker,
                                                               message: str) -> None:
    check = MarkerCheck("op/1", (2, "b"), [(3, "c"), (4, "d")])
    with pytest.raises(LineageError, match=message.replace("(", r"\(")):
        check.check(marker, "here")


def test_a_replay_that_stops_early_is_a_lineage_error() -> None:
    check = MarkerCheck("op/1", (2, "b"), [(3, "c"), (4, "d")])
    check.check(VersionMarker(3, "c", "b"), "here")
    with pytest.raises(LineageError, match=r"lacks the changes of versions \[4\]"):
        check.finish("the handle")


def test_no_database_is_opened_before_the_first_load(env: BackendEnv) -> None:  # noqa: F811
    backend = env.backend()
    env.provider(backend)
    local_files = [f for _, _, files in os.walk(backend.settings.local_dir) for f in files]
    assert local_files == []
    env.provider(backend).get_store(0)
    assert any(name == "CURRENT" for _, _, files in os.walk(backend.settings.local_dir)
               for name in files)


@pytest.mark.parametrize("conf,expected", [
    ({}, {"compaction_style": "kCompactionStyleLevel", "max_bytes_for_level_base": "268435456",
          "target_file_size_base": "67108864", "level0_file_num_compaction_trigger": "4",
          "level_compaction_dynamic_level_bytes": "true"}),
    ({"spark.dstl.rocksdb.compactionStyle": "level",
      "spark.dstl.rocksdb.maxBytesForLevelBase": "16MB",
      "spark.dstl.rocksdb.targetFileSizeBase": "4MB",
      "spark.dstl.rocksdb.level0CompactionTrigger": "2"},
     {"compaction_style": "kCompactionStyleLevel", "max_bytes_for_level_base": "16777216",
      "target_file_size_base": "4194304", "level0_file_num_compaction_trigger": "2"}),
    ({"spark.dstl.rocksdb.compactionStyle": "universal",
      "spark.dstl.rocksdb.universal.maxSizeAmplificationPercent": "40"},
     {"compaction_style": "kCompactionStyleUniversal", "max_size_amplification_percent": "40"}),
], ids=["defaults", "level", "universal"])
def test_rocksdb_settings_reach_the_store_s_rocksdb(tmp_path: object, conf: dict[str, str],
                                                     expected: dict[str, str]) -> None:
    """The OPTIONS file RocksDB writes for an open store shows every configured value."""
    from pathlib import Path

    from pyspark_dstl.backend.store.state_backend import StateBackend

    root = Path(str(tmp_path))
    options = BackendSettings.from_mapping(
        {**conf, "spark.dstl.stateStore.localDir": str(root / "local")})
    url = (root / "remote").as_uri()
    (root / "remote").mkdir()
    with StateBackend(options) as backend:
        store = backend.provider(url, "op", 0).get_store(0)
        store.put(b"k", b"v")
        store.commit()
        found = sorted((root / "local").rglob("OPTIONS-*"), key=lambda p: p.stat().st_mtime)
        assert found, "no RocksDB OPTIONS file under the local directory"
        written: dict[str, str] = {}
        for line in found[-1].read_text().splitlines():
            name, sep, value = line.strip().partition("=")
            if sep:
                written.setdefault(name, value)
            if value.startswith("{"):  # nested, e.g. compaction_options_universal={a=1;...}
                for item in value.strip("{}").split(";"):
                    inner, sep, inner_value = item.partition("=")
                    if sep:
                        written.setdefault(inner, inner_value)
    assert {name: written.get(name) for name in expected} == expected


def test_an_unknown_compaction_style_is_named() -> None:
    with pytest.raises(ConfigError, match=r"spark\.dstl\.rocksdb\.compactionStyle"):
        BackendSettings.from_mapping({"spark.dstl.rocksdb.compactionStyle": "fifo"})


def test_encode_changes_writes_the_payload_encode_payload_writes() -> None:
    marker = VersionMarker(4, "u" * 32, "b" * 32)
    sizes = [0, 1, 31, 32, 255, 256, 65535, 65536]
    table: dict[bytes, bytes | None] = {b"k%d" % n: os.urandom(n) for n in sizes}
    assert encode_changes(marker, [("default", table)], ()) == encode_payload(
        marker, [(OP_PUT, "default", key, value) for key, value in table.items()])
    mixed: dict[bytes, bytes | None] = {b"a": b"1", b"gone": None, b"b" * 300: b"2"}
    other: dict[bytes, bytes | None] = {b"x": None}
    for may_delete in (None, {"cf \u00e9" + "c" * 40, "other"}):
        payload = encode_changes(marker, [("cf \u00e9" + "c" * 40, mixed), ("other", other)],
                                 may_delete)
        decoded_marker, records = decode_payload(payload, "here")
        assert decoded_marker == marker
        assert sorted(records) == sorted([
            (OP_PUT, "cf \u00e9" + "c" * 40, b"a", b"1"),
            (OP_PUT, "cf \u00e9" + "c" * 40, b"b" * 300, b"2"),
            (OP_DELETE, "cf \u00e9" + "c" * 40, b"gone", None),
            (OP_DELETE, "other", b"x", None)])
    assert decode_payload(encode_changes(marker, []), "here") == (marker, [])


def test_the_transaction_cache_counts_entries_and_bytes_as_writes_replace_each_other() -> None:
    cache = TransactionCache(max_entries=4, max_bytes=1 << 20)
    cost = len(cf_prefix("cf")) + 16  # physical key and overhead, without the user key
    cache.put("cf", b"k", b"12345")
    cache.put("cf", b"k", b"12")
    cache.remove("cf", b"d")
    cache.remove("cf", b"k")
    cache.put("cf", b"d", b"123")
    assert len(cache) == 2 and cache.size_bytes == 2 * (cost + 1) + 3
    assert not cache.is_full()
    cache.put("other", b"x", b"")
    cache.put("cf", b"y", b"")
    assert len(cache) == 4 and cache.is_full()
    with pytest.raises(StoreIdError, match="column family name"):
        cache.put("bad\x00cf", b"k", b"v")
    cache.clear()
    assert (len(cache), cache.size_bytes, cache.pending()) == (0, 0, [])


def test_retaining_a_single_batch_is_refused_because_takeovers_need_two() -> None:
    with pytest.raises(ConfigError, match=r"^spark\.dstl\.stateStore\.minBatchesToRetain"):
        BackendSettings.from_mapping({"spark.dstl.stateStore.minBatchesToRetain": "1"})
