"""Storage faults: commits go on through failing requests, or fail loudly, and lose nothing.

The short form of `python -m tests.reliability.storm`; figures in docs/reliability.md.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import BackendError, CommitLogError
from tests.reliability.model import WorkloadSpec
from tests.reliability.soak import verify_root
from tests.reliability.storm import FAULTS, run_storm, storm_options
from tests.reliability.workload import Workload
from tests.support import FaultRule, S3Env

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("probability", [0.01, 0.05, 0.2])
def test_commits_go_on_through_failing_requests_and_lose_nothing(
        s3: S3Env, tmp_path: Path, probability: float) -> None:
    batches = 15
    figures = run_storm(s3, tmp_path, probability, batches, seed=int(probability * 100))
    # every batch committed, some perhaps by a retry (or by an attempt that reported a
    # failure after its commit log entry had landed: recovery reads that back)
    assert figures.recovered_batch == batches - 1
    assert figures.faults_injected > 0
    if probability >= 0.2:
        assert set(figures.faults) == {action for action, _ in FAULTS}
    assert verify_root(s3.url, s3) == []


def committed_workload(s3: S3Env, tmp_path: Path, batches: int) -> Workload:
    workload = Workload(WorkloadSpec(seed=21, partitions=2), s3.url,
                        storm_options(s3, tmp_path / "host"), rng=random.Random(21),
                        max_failures=0)
    workload.recover()
    workload.run(batches - 1)
    return workload


def test_a_changelog_upload_failing_past_the_retries_fails_the_commit_loudly(
        s3: S3Env, tmp_path: Path) -> None:
    workload = committed_workload(s3, tmp_path, 3)
    try:
        s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains=".changelog",
                                    status=503))
        with pytest.raises(BackendError, match=r"could not persist its changelog.*\.changelog"):
            workload.run_batch(3)
        assert workload.backend.commit_log(s3.url).batch_ids() == [0, 1, 2]
        s3.proxy.clear_rules()
        assert workload.recover() == 2
        workload.run(4)
    finally:
        workload.close()
    assert verify_root(s3.url, s3) == []


def test_a_commit_log_write_failing_past_the_retries_names_the_entry_and_writes_none(
        s3: S3Env, tmp_path: Path) -> None:
    workload = committed_workload(s3, tmp_path, 2)
    try:
        s3.proxy.add_rule(FaultRule("reset", method="PUT", path_contains="/commits/"))
        with pytest.raises(CommitLogError, match=r"commit log entry 'commits/2\.0'"):
            workload.run_batch(2)
        s3.proxy.clear_rules()
        assert "commits/2.0" not in s3.direct_keys()
        assert workload.recover() == 1
        workload.run(3)
    finally:
        workload.close()
