"""The tests' Hadoop local file system (tests/support/local_file_system.py) writes what
Hadoop's own writes: the same permission bits, set inside the JVM."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.local_file_system import CLASS_NAME, file_system_settings

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not file_system_settings(),
                                 reason="the in-process chmod class is not made: "
                                        "python -m tests.support.local_file_system")]


def local_file_system(spark: Any) -> Any:
    jvm = spark.sparkContext._jvm
    configuration = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), configuration)


def hadoop_path(spark: Any, path: Path) -> Any:
    return spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path.as_uri())


def permission(spark: Any, mode: int) -> Any:
    return spark.sparkContext._jvm.org.apache.hadoop.fs.permission.FsPermission(mode)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_sessions_use_the_in_process_chmod_class(spark: Any) -> None:
    assert local_file_system(spark).getClass().getName() == CLASS_NAME


def test_a_created_file_and_its_checksum_get_the_default_mode_under_the_umask(
        spark: Any, tmp_path: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    stream = local_file_system(spark).create(hadoop_path(spark, tmp_path / "a.txt"), True)
    stream.write(b"abc")
    stream.close()
    assert (tmp_path / "a.txt").read_bytes() == b"abc"
    assert mode_of(tmp_path / "a.txt") == 0o666 & ~umask
    assert mode_of(tmp_path / ".a.txt.crc") == 0o666 & ~umask


@pytest.mark.parametrize("mode", [0o750, 0o604, 0o000, 0o777])
def test_set_permission_sets_exactly_the_nine_bits(spark: Any, tmp_path: Path,
                                                   mode: int) -> None:
    (tmp_path / "f").write_bytes(b"")
    local_file_system(spark).setPermission(hadoop_path(spark, tmp_path / "f"),
                                           permission(spark, mode))
    assert mode_of(tmp_path / "f") == mode


def test_a_mode_with_the_sticky_bit_is_set_by_hadoops_own_code(spark: Any,
                                                               tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    local_file_system(spark).setPermission(hadoop_path(spark, tmp_path / "d"),
                                           permission(spark, 0o1755))
    assert mode_of(tmp_path / "d") == 0o1755
