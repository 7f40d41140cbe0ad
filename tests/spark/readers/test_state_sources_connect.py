"""Spark's state sources on this backend's location through a Spark Connect client: the
switch routes the Connect reader's `load()` as it routes the classic one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_connect import run_client
from tests.support.connect import ConnectServer
from tests.support.spark import REPO_ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_statestore_and_state_metadata_read_the_switchs_location_through_connect(
        connect_server: ConnectServer, tmp_path: Path) -> None:
    done = run_client(str(REPO_ROOT / "tests" / "support" / "connect_state_client.py"),
                      connect_server.url, str(tmp_path), cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["schema"] == "struct<key:struct<user:string>,value:struct<count:bigint>," \
                               "partition_id:int>"
    assert [row[:2] for row in result["state"]] == [["a", 3], ["b", 1], ["c", 1]]
    assert result["changes"] == [[1, "update", "a"], [1, "update", "c"]]
    assert result["metadata"]["operatorName"] == "transformWithStateInPandasExec"
    assert result["metadata"]["maxBatchId"] == 1
