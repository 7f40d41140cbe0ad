"""Child process for S3 runs: moto's S3 server behind the FaultProxy with a latency model.

Run by benchmarks.s3.S3Harness, never by hand. It lives in its own process so that moto and
the proxy do not compete with the measured code for one GIL (a real S3 is not in our process
either). Commands arrive as JSON lines on stdin; each answer is one JSON line on the original
stdout, while everything else the child prints goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from benchmarks.latency import LatencyModel
from tests.support import FaultProxy, MotoServer


class Server:
    def __init__(self, seed: int) -> None:
        self.moto = MotoServer().start()
        self.moto.reset()
        self.proxy = FaultProxy(self.moto.endpoint_url, seed=seed).start()

    def handle(self, command: dict[str, Any]) -> Any:
        op = command.get("op")
        if op == "latency":
            model = command.get("model")
            self.proxy.set_latency_model(LatencyModel.from_dict(model) if model else None)
            return None
        if op == "bucket":
            return self.moto.create_bucket(str(command.get("prefix", "bench")))
        if op == "stats":
            records = self.proxy.records(command.get("method"), command.get("path"))
            return {"count": len(records), "bytes_in": sum(r.bytes_in for r in records),
                    "bytes_out": sum(r.bytes_out for r in records),
                    "failed": sum(1 for r in records if r.status is None or r.status >= 400)}
        if op == "reset_log":
            self.proxy.reset_log()
            return None
        if op == "reset_moto":
            self.moto.reset()
            return None
        if op == "idle":
            return self.proxy.wait_idle(float(command.get("timeout", 30.0)))
        raise ValueError(f"unknown command {op!r}")

    def stop(self) -> None:
        self.proxy.stop()
        self.moto.stop()


def serve(requests: TextIO, answers: TextIO, seed: int) -> None:
    server = Server(seed)
    answers.write(json.dumps({"proxy": server.proxy.url, "moto": server.moto.endpoint_url})
                  + "\n")
    answers.flush()
    try:
        for line in requests:
            command = json.loads(line)
            if command.get("op") == "stop":
                break
            try:
                answer = {"ok": True, "result": server.handle(command)}
            except Exception as exc:  # reported to the parent, which raises it there
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        server.stop()


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not break the protocol
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    serve(sys.stdin, answers, seed)


if __name__ == "__main__":
    main()
