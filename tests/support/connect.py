"""A Spark Connect server from the pyspark package, on loopback, for the Connect tests.

Started in the foreground with spark-submit (what sbin/start-connect-server.sh wraps), so the
test owns the process and its log. Its Python workers (and the process that runs
foreachBatch functions) use this interpreter and import this checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.spark import REPO_ROOT, WORKER_SITE, free_port, in_process_checkpoint_files

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = "Spark Connect server started at"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class ConnectServer:
    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_path = work_dir / "connect-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 400.0) -> ConnectServer:
        env = client_environment()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
            "spark.pyspark.python": sys.executable,
            "spark.sql.streaming.pollingDelay": "10ms",
            **in_process_checkpoint_files(),
        }
        command = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
                   "--name", "dstl-connect-tests", "--master", "local[2]"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        command.append("spark-internal")
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(command, env=env, stdout=log,
                                             stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the Connect server exited: {self.tail()}")
            if STARTED in self.log_path.read_text(errors="replace"):
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the Connect server did not start in {timeout} s: {self.tail()}")

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def client_environment() -> dict[str, str]:
    """Python on loopback, this interpreter, this checkout importable (and pyspark read from
    the package: worker_site/sitecustomize.py)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(WORKER_SITE)])
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.pop("SPARK_REMOTE", None)
    return env
