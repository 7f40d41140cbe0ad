"""The tests' own JVMs: short-lived ones (kill tests, daemons, the Connect server) start with
the client compiler alone; the shared session of a test process, which lives for the whole
run, may use the optimizing compiler (tests/support/jvm_archive.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.jvm_archive import CLIENT_COMPILER_ONLY, jvm_options_for_tests

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _options_of_the_tests() -> None:
    if os.environ.get("JDK_JAVA_OPTIONS") != jvm_options_for_tests():
        pytest.skip("JDK_JAVA_OPTIONS was set outside the tests: it is kept as it is")


def jvm_arguments(spark: Any) -> list[str]:
    bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    return [str(argument) for argument in bean.getInputArguments()]


def test_the_shared_session_may_use_the_optimizing_compiler(spark: Any) -> None:
    assert "-XX:+UseSerialGC" in jvm_arguments(spark)
    assert CLIENT_COMPILER_ONLY not in jvm_arguments(spark)


def test_other_test_jvms_keep_the_client_compiler_alone(spark: Any) -> None:
    assert CLIENT_COMPILER_ONLY in os.environ["JDK_JAVA_OPTIONS"].split()
