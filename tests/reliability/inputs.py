"""The bad inputs of test_bad_input.py, and a count of how many of them are refused.

    python -m tests.reliability.inputs

prints, per kind of input, how many bad values were tried and how many were refused with an
error naming the culprit (the tests assert the same, one behaviour at a time).
"""

from __future__ import annotations

import datetime
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError, ProviderError, StoreIdError
from pyspark_dstl.backend.backend_settings import BACKEND_SETTING_KEYS as BACKEND_KEYS
from pyspark_dstl.backend.backend_settings import FENCING_KEYS, BackendSettings
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_errors import StorageError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import CHANGELOG_SETTING_KEYS as CHANGELOG_KEYS
from pyspark_dstl.changelog.storage.storage_settings import StorageSettings
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.materializer.materializer_settings import (
    MATERIALIZER_SETTING_KEYS as MATERIALIZATION_KEYS,
)
from pyspark_dstl.spark.codec.values import encode_value
from pyspark_dstl.spark.spark_errors import StateEncodingError

ALL_KEYS = ([f"spark.dstl.{key}" for key in BACKEND_KEYS.values()]
            + [f"spark.dstl.changelog.{key}" for key in CHANGELOG_KEYS.values()]
            + [f"spark.dstl.materialization.{key}" for key in MATERIALIZATION_KEYS.values()]
            + [f"spark.dstl.fencing.{key}" for key in FENCING_KEYS.values()])
FREE_TEXT = {  # any non-blank text is a valid directory, region or credential
    "spark.dstl.stateStore.localDir", "spark.dstl.changelog.read.cacheDir",
    "spark.dstl.changelog.s3.region", "spark.dstl.changelog.s3.accessKeyId",
    "spark.dstl.changelog.s3.secretAccessKey", "spark.dstl.changelog.s3.sessionToken",
    "spark.dstl.materialization.cacheDir",
}
CHECKED_KEYS = sorted(set(ALL_KEYS) - FREE_TEXT)
GARBAGE = ["", "   ", "banana", "-1", "0", "-5ms", "10 parsecs", "1e400", "maybe", "nan"]
BAD_ENDPOINTS = ["not a url", "ftp://127.0.0.1:9000", "127.0.0.1:9000"]
BAD_PROVIDERS = ["no_such_module.Provider", "pyspark_dstl.backend.store.api.StateStore",
                 "pyspark_dstl.backend.store.api.StateStoreProvider", "builtins.dict"]
ESCAPING_OPERATORS = ["a/b", "..", "../x", "a\\b", "", "x\x00y", "a..b",
                      "x" * 300, "é" * 100]  # the last two: longer than a file name can be
BAD_PARTITIONS: list[Any] = [-1, True, "1", 1.0, 2**32, 2**70]  # beyond: not a key group
ESCAPING_UNIQUE_IDS = ["../../etc", "a/b", "", "x" * 65, "ab cd", "..", "a\\b"]
ESCAPING_KEYS = ["../outside", "/absolute", "a//b", "a/./b", "a/../../b", "a\\b", "x\x00"]
UNENCODABLE: list[Any] = [object(), {1, 2}, 2**70, datetime.datetime(2024, 1, 1), 1 + 2j]


def refused(attempt: Callable[[], object], errors: tuple[type[BaseException], ...],
            culprit: str) -> bool:
    """True when `attempt` raises one of `errors` whose message names `culprit`."""
    try:
        attempt()
    except errors as exc:
        return culprit in str(exc)
    return False


def count(workdir: Path) -> list[tuple[str, int, int]]:
    """(kind of input, tried, refused naming the culprit)."""
    rows = []
    conf = [refused(partial(BackendSettings.from_mapping, {key: value}), (ConfigError,), key)
            for key in CHECKED_KEYS for value in GARBAGE]
    # not every garbage value is wrong for every key ("0" is a fine timeout): count refusals
    rows.append((f"settings x garbage values ({len(CHECKED_KEYS)} x {len(GARBAGE)})",
                 len(conf), sum(conf)))
    endpoints = [refused(partial(StorageSettings, s3_endpoint_url=endpoint), (ConfigError,),
                         "s3.endpoint") for endpoint in BAD_ENDPOINTS]
    rows.append(("S3 endpoints", len(endpoints), sum(endpoints)))
    providers = [refused(partial(_backend, path, workdir / "p"), (ProviderError,), path)
                 for path in BAD_PROVIDERS]
    rows.append(("provider classes", len(providers), sum(providers)))
    url = (workdir / "ckpt").as_uri()
    with StateBackend(BackendSettings(local_dir=str(workdir / "local"))) as backend:
        operators = [refused(partial(backend.provider, url, operator, 0), (StoreIdError,),
                             "operator name") for operator in ESCAPING_OPERATORS]
        partitions = [refused(partial(backend.provider, url, "op", partition),
                              (StoreIdError,), "partition") for partition in BAD_PARTITIONS]
        provider = backend.provider(url, "op", 0)
        ids = [refused(partial(provider.get_store, 1, unique_id), (BackendError,),
                       "unique id") for unique_id in ESCAPING_UNIQUE_IDS]
    rows += [("operator names", len(operators), sum(operators)),
             ("partitions", len(partitions), sum(partitions)),
             ("unique ids", len(ids), sum(ids))]
    with ChangelogService((workdir / "keys").as_uri()) as storage:
        keys = [refused(partial(storage.put, key, b"x"), (StorageError,),
                        "invalid storage key") for key in ESCAPING_KEYS]
    rows.append(("storage keys", len(keys), sum(keys)))
    values = [refused(partial(encode_value, value, None, "v"), (StateEncodingError,),
                      "state v") for value in UNENCODABLE]
    rows.append(("state values", len(values), sum(values)))
    return rows


def _backend(provider_class: str, local_dir: Path) -> StateBackend:
    return StateBackend(BackendSettings(provider_class=provider_class, local_dir=str(local_dir)))


def main(argv: Sequence[str] | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="dstl-inputs-") as workdir:
        rows = count(Path(workdir))
    for kind, tried, refused_count in rows:
        print(f"{kind:<45} tried {tried:>4}  refused {refused_count:>4}")
    print(f"{'total':<45} tried {sum(r[1] for r in rows):>4}  "
          f"refused {sum(r[2] for r in rows):>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
