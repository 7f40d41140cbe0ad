"""One state partition of a chained step's processor, run batch after batch on a real RocksDB
store without Spark (the chained processors' tests and the chained import's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.stage.runner import BatchTimes, run_processor
from tests.support.backend import BackendEnv

STAMP = pa.timestamp("us", tz="UTC")


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Partition:
    """Batches of one state partition on one store, each committed before the next."""

    def __init__(self, root: BackendEnv, key_types: tuple[str, ...]) -> None:
        self.provider = root.provider(root.backend())
        self.info: Any = None
        self.grouping = KeyGrouping(key_types, KEY_GROUPS)

    def store(self) -> StateStore:
        if self.info is None:
            return self.provider.get_store(0)
        return self.provider.get_store(self.info.version, self.info)

    def run(self, processor: Any, table: pa.Table, keys: tuple[str, ...], output: pa.Schema,
            watermark_s: int) -> list[dict[str, Any]]:
        store = self.store()
        result = run_processor(processor, store, table, keys, output, batch_id=0,
                               partition_id=0,
                               times=BatchTimes(0, watermark_s * 1000, "event_time"),
                               grouping=self.grouping)
        self.info = store.commit()
        return sorted(result.output.to_pylist(), key=_order)


def _order(row: dict[str, Any]) -> str:
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {name: plain(item) for name, item in value.items()}
        return value.timestamp() if isinstance(value, datetime) else value

    return repr(plain(row))


