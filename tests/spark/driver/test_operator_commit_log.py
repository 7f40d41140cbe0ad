"""What the driver's operator reads of the commit log per batch: one listing, and only the
entries it has not seen yet (a query keeps minBatchesToRetain entries, 100 by default, which
a look-up of the batch before would otherwise read again in every batch)."""

from __future__ import annotations

from pathlib import Path

from pyspark_dstl.spark.driver.operator import OperatorSpec, StatefulOperator
from pyspark_dstl.spark.query_settings import DstlSettings
from tests.support.backend import entry, s3_env
from tests.support.moto_server import S3Env
from tests.support.spark import CountProcessor


def test_each_batch_reads_the_commit_log_with_one_listing_and_the_newest_entry_only_on_s3(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        log = made.commit_log()
        for batch_id in range(12):
            log.write(batch_id, entry(batch_id))
        spec = OperatorSpec(processor=CountProcessor(), key_columns=("user",),
                            output_schema=None, location=s3.url)
        operator = StatefulOperator(spec, DstlSettings.from_settings(
            {f"spark.dstl.{key}": str(value) for key, value in s3.query_settings().items()}))
        assert operator.base_for(12).batch_id == 11
        log.write(12, entry(12))
        s3.proxy.reset_log()
        base = operator.base_for(13)
        assert base.batch_id == 12 and base.entry is not None and base.entry.batch_id == 12
        assert len(s3.proxy.records("GET", "list-type")) == 1
        reads = [r.path for r in s3.proxy.records("GET") if "list-type" not in (r.query or "")]
        assert len(reads) == 1 and reads[0].endswith(f"/{s3.prefix}/commits/12.0")
    finally:
        made.close()
