"""The main job against the S3 API, with request hedging on.

It starts a moto S3 server on 127.0.0.1 (moto comes with the test extras), creates a bucket,
and runs examples/main_job.py's sessionization with its state checkpoint in that bucket. The
credentials come from the environment, as they would on a cluster; the engine's own checkpoint
(offsets, commits) stays on local disk, since Spark itself cannot write to s3:// without
hadoop-aws.

    python examples/s3_job.py --files 5
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import boto3
from main_job import parser, run
from moto.server import ThreadedMotoServer

BUCKET = "pyspark-dstl-example"


def main() -> int:
    args = parser().parse_args()
    if args.work_dir == parser().get_default("work_dir"):
        args.work_dir = str(Path(args.work_dir).with_name("s3_job"))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        # credentials from the environment, like an instance profile or exported keys
        os.environ.update({"AWS_ACCESS_KEY_ID": "example", "AWS_SECRET_ACCESS_KEY": "example",
                           "AWS_DEFAULT_REGION": "us-east-1"})
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        settings = {
            "changelog.s3.endpoint": endpoint,
            "changelog.s3.region": "us-east-1",
            "changelog.s3.addressingStyle": "path",
            "changelog.hedging.enabled": "true",
            "changelog.hedging.quantile": "0.95",
            "stateStore.minBatchesToRetain": "10",
            "query.cleanupInterval": "5",
        }
        engine = str(Path(args.work_dir).resolve() / "engine-checkpoint")
        print(f"S3 API (moto) at {endpoint}, bucket {BUCKET}")
        return run(args, f"s3://{BUCKET}/sessions", settings, engine_checkpoint=engine)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
