"""Bad input gets a clear error naming the culprit, and nothing is written because of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import CommitLogError, ProviderError, StoreIdError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_log import CommitEntry
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_errors import StorageError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.processors.processor import StatefulProcessorHandle
from pyspark_dstl.spark.processors.state_variables import KeyContext
from pyspark_dstl.spark.spark_errors import StateEncodingError
from tests.reliability.inputs import (
    BAD_ENDPOINTS,
    BAD_PARTITIONS,
    BAD_PROVIDERS,
    CHECKED_KEYS,
    ESCAPING_KEYS,
    ESCAPING_OPERATORS,
    ESCAPING_UNIQUE_IDS,
    GARBAGE,
    UNENCODABLE,
)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize("key", CHECKED_KEYS)
def test_a_setting_of_the_wrong_kind_is_refused_naming_its_full_key(key: str) -> None:
    refused = []
    for value in GARBAGE:
        try:
            BackendSettings.from_mapping({key: value})
        except ConfigError as exc:
            assert key in str(exc), f"{key}={value!r}: {exc}"
            refused.append(value)
    assert refused, f"{key} accepts every one of {GARBAGE}"


def test_an_s3_endpoint_that_is_not_an_http_url_is_refused_at_once() -> None:
    for endpoint in BAD_ENDPOINTS:
        with pytest.raises(ConfigError, match=r"spark\.dstl\.changelog\.s3\.endpoint"):
            BackendSettings.from_mapping({"spark.dstl.changelog.s3.endpoint": endpoint})


@pytest.mark.parametrize("path", BAD_PROVIDERS)
def test_an_unusable_provider_class_fails_before_anything_is_created(
        tmp_path: Path, path: str) -> None:
    with pytest.raises(ProviderError, match=path.replace(".", r"\.")):
        StateBackend(BackendSettings(provider_class=path, local_dir=str(tmp_path / "local")))
    assert files_under(tmp_path) == []


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[StateBackend]:
    made = StateBackend(BackendSettings(local_dir=str(tmp_path / "local"),
                                       changelog=ChangelogSettings(persist_delay=0.0)))
    yield made
    made.close()


def test_operator_names_and_partitions_that_could_escape_are_refused_before_any_io(
        tmp_path: Path, backend: StateBackend) -> None:
    url = (tmp_path / "ckpt").as_uri()
    for operator in ESCAPING_OPERATORS:
        with pytest.raises(StoreIdError, match="operator name"):
            backend.provider(url, operator, 0)
    for partition in BAD_PARTITIONS:
        with pytest.raises(StoreIdError, match="partition"):
            backend.provider(url, "op", partition)
    assert files_under(tmp_path) == []


def test_an_overlong_operator_name_and_a_partition_past_the_key_groups_fail_at_provider_creation(
        tmp_path: Path, backend: StateBackend) -> None:
    url = (tmp_path / "ckpt").as_uri()
    with pytest.raises(StoreIdError, match=r"operator name .xxxx.* is 300 bytes long in UTF-8; "
                                           r"at most 128"):
        backend.provider(url, "x" * 300, 0)
    with pytest.raises(StoreIdError, match=r"partition must be an integer in 0\.\.4294967295, "
                                           r"got 1180591620717411303424"):
        backend.provider(url, "op", 2**70)
    assert files_under(tmp_path) == []


def test_unique_ids_that_could_escape_are_refused_and_nothing_is_written(
        tmp_path: Path, backend: StateBackend) -> None:
    url = (tmp_path / "ckpt").as_uri()
    provider = backend.provider(url, "op", 0)
    store = provider.get_store(0)
    store.put(b"k", b"v")
    info = store.commit()
    before = files_under(tmp_path / "ckpt")
    for unique_id in ESCAPING_UNIQUE_IDS:
        with pytest.raises(StoreIdError, match="unique id"):
            provider.get_store(1, unique_id)
    with pytest.raises(StoreIdError, match="version"):
        provider.get_store(-1, info.unique_id)
    assert files_under(tmp_path / "ckpt") == before
    assert dict(provider.get_store(1, info).iterator()) == {b"k": b"v"}


def test_storage_keys_that_could_escape_the_root_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "root"
    with ChangelogService(root.as_uri(), ChangelogSettings(persist_delay=0.0)) as storage:
        for key in ESCAPING_KEYS:
            with pytest.raises(StorageError, match="invalid storage key"):
                storage.put(key, b"escape")
    assert files_under(tmp_path) == []


def test_a_negative_batch_id_is_refused_and_no_entry_is_written(
        tmp_path: Path, backend: StateBackend) -> None:
    url = (tmp_path / "ckpt").as_uri()
    with pytest.raises(CommitLogError, match="batch id must be a non-negative integer"):
        backend.commit_log(url).write(-1, CommitEntry(-1, {}))
    assert files_under(tmp_path / "ckpt") == []


def test_a_value_larger_than_every_buffer_commits_and_loads_byte_for_byte(
        tmp_path: Path) -> None:
    """32 MB value, 1 MB key: beyond the in-flight limit, the write cache and the
    pre-emptive upload threshold configured here."""
    small = ChangelogSettings(persist_delay=0.0, max_in_flight_bytes=8 << 20,
                             preemptive_persist_threshold=1 << 20,
                             persist_size_threshold=2 << 20)
    url = (tmp_path / "ckpt").as_uri()
    key, value = b"K" * (1 << 20), bytes(range(256)) * (1 << 17)
    with StateBackend(BackendSettings(local_dir=str(tmp_path / "a"), changelog=small,
                                     tx_cache_max_bytes=4 << 20)) as writer:
        store = writer.provider(url, "op", 0).get_store(0)
        store.put(key, value)
        store.put(b"small", b"1")
        info = store.commit()
    with StateBackend(BackendSettings(local_dir=str(tmp_path / "b"))) as reader:
        loaded = reader.provider(url, "op", 0).get_store(1, info)
        assert loaded.get(key) == value
        assert dict(loaded.iterator()) == {key: value, b"small": b"1"}


GROUPING = KeyGrouping(("string",), KEY_GROUPS)  # the test's keys: one string column


def test_a_state_value_msgpack_cannot_encode_is_refused_naming_the_variable(
        tmp_path: Path, backend: StateBackend) -> None:
    url = (tmp_path / "ckpt").as_uri()
    provider = backend.provider(url, "op", 0)
    store = provider.get_store(0)
    context = KeyContext(now_ms=0, grouping=GROUPING)
    handle = StatefulProcessorHandle(store, context, batch_id=0, partition_id=0)
    totals = handle.get_value_state("totals")
    cyclic: list[object] = []
    cyclic.append(cyclic)
    for number, value in enumerate([*UNENCODABLE, cyclic]):
        context.current = GROUPING.encode([(f"user-{number}",)])[0]
        with pytest.raises(StateEncodingError, match="state totals"):
            totals.update(value)
    with pytest.raises(StateEncodingError, match="state totals"):
        totals.update_many([["a"], ["b"], ["c"]], [1, object(), 3])
    context.current = GROUPING.encode([("good",)])[0]
    totals.update(7)
    info = store.commit()
    reloaded = provider.get_store(1, info)
    assert [key for key, _ in reloaded.iterator("value/totals")] == \
        GROUPING.encode([("good",)])
