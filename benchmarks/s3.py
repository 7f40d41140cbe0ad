"""S3Harness: moto + FaultProxy in a child process (benchmarks/s3_server.py), steered from here.

The harness code itself is the test suite's (tests/support): this module only starts it in
another process and talks to it with JSON lines, so nothing is pickled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from types import TracebackType
from typing import Any

from benchmarks.harness import REPO_ROOT
from benchmarks.latency import LatencyModel
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage.storage_settings import StorageSettings
from tests.support.moto_server import ACCESS_KEY, REGION, SECRET_KEY


class S3HarnessError(RuntimeError):
    """The S3 child process failed to start or to answer."""


class S3Harness:
    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self.proxy_url = ""
        self.moto_url = ""

    def start(self) -> S3Harness:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.s3_server", str(self._seed)],
            cwd=str(REPO_ROOT), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, bufsize=1)
        hello = self._read()
        self.proxy_url, self.moto_url = hello["proxy"], hello["moto"]
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            assert process.stdin is not None
            process.stdin.write(json.dumps({"op": "stop"}) + "\n")
            process.stdin.flush()
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()

    def __enter__(self) -> S3Harness:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- commands ---------------------------------------------------------------------------

    def set_latency(self, model: LatencyModel | None) -> None:
        self._call({"op": "latency", "model": model.to_dict() if model else None})

    def create_bucket(self, prefix: str = "bench") -> str:
        bucket: str = self._call({"op": "bucket", "prefix": prefix})
        return bucket

    def stats(self, method: str | None = None, path: str | None = None) -> dict[str, int]:
        """Requests the proxy saw (count, bytes_in, bytes_out, failed) since the last reset."""
        result: dict[str, int] = self._call({"op": "stats", "method": method, "path": path})
        return result

    def reset_log(self) -> None:
        self._call({"op": "reset_log"})

    def reset_moto(self) -> None:
        """Drop every bucket and object: moto keeps small objects in memory."""
        self._call({"op": "reset_moto"})

    def wait_idle(self, timeout: float = 30.0) -> bool:
        idle: bool = self._call({"op": "idle", "timeout": timeout})
        return idle

    def options(self, **changes: Any) -> ChangelogSettings:
        """ChangelogSettings aimed at the proxy (path addressing, the moto credentials)."""
        storage = StorageSettings(s3_endpoint_url=self.proxy_url, s3_region=REGION,
                                 s3_access_key_id=ACCESS_KEY, s3_secret_access_key=SECRET_KEY,
                                 s3_addressing_style="path")
        return ChangelogSettings(storage=storage, **changes)

    def new_root(self, prefix: str = "bench") -> str:
        """A URL in a fresh bucket."""
        return f"s3://{self.create_bucket(prefix)}/root"

    # --- the wire ---------------------------------------------------------------------------

    def _call(self, command: dict[str, Any]) -> Any:
        with self._lock:
            process = self._process
            if process is None or process.stdin is None:
                raise S3HarnessError("the S3 harness is not running")
            process.stdin.write(json.dumps(command) + "\n")
            process.stdin.flush()
            answer = self._read()
        if not answer.get("ok"):
            raise S3HarnessError(f"S3 harness command {command.get('op')!r} failed: "
                                 f"{answer.get('error')}")
        return answer.get("result")

    def _read(self) -> dict[str, Any]:
        process = self._process
        assert process is not None and process.stdout is not None
        line = process.stdout.readline()
        if not line:
            code = process.poll()
            raise S3HarnessError(f"the S3 harness process ended (exit code {code}); see its "
                                 f"output above")
        answer: dict[str, Any] = json.loads(line)
        return answer
