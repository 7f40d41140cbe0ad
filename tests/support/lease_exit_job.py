"""A process that ends while it holds a checkpoint's lease and is slow to exit (as a Spark
session stopping at exit is), for the test that its renewal thread stays quiet meanwhile:

    python -m tests.support.lease_exit_job <checkpoint url>
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings

LEASE = FencingSettings(lease_duration=0.6)  # renewed every 0.2 s


def main(url: str) -> None:
    logging.basicConfig(level=logging.WARNING)
    storage = ChangelogService(url, ChangelogSettings())
    acquire(storage, LEASE)
    atexit.register(time.sleep, 1.0)  # renewals fall due after Python shut its threads down
    # ... and while it waits for a busy thread pool at exit, before the main thread has ended
    ThreadPoolExecutor(1).submit(time.sleep, 1.0)
    print("holding the lease", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
