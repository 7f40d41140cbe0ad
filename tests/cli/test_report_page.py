"""The report page: written by the CLI from a real query's checkpoint, opened in a real headless
Chromium (no console errors, every plot drawn), and readable for entries without metrics."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.ops.report_page import PLOTS, batch_rows, render_report
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.cli import main
from pyspark_dstl.spark import stateful
from tests.support.browser import chromium_path, visit
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    file_stream,
    make_batches,
    write_batches,
)

PLOTS_DRAWN = "document.querySelectorAll('svg.plot').length"


@pytest.fixture(scope="module")
def checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of four batches, with snapshots taken along the way."""
    root = tmp_path_factory.mktemp("report")
    write_batches(root / "in", make_batches(4, rows=80, keys=20, seed=31))
    stream = (stateful(file_stream(spark, root / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(root / "ckpt"),
                       partitions=2, settings={"materialization.everyNCommits": "1",
                                               "materialization.interval": "off"}))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    return root / "ckpt"


def require_chromium() -> None:
    if chromium_path() is None:
        if os.geteuid() == 0:
            pytest.fail("chromium is missing: scripts/run_tests.sh installs it "
                        "(scripts/ensure_chromium.sh)")
        pytest.skip("chromium is missing and this is not root (scripts/ensure_chromium.sh)")


@pytest.mark.spark
@pytest.mark.browser
def test_report_renders_every_plot_in_chromium_without_errors(checkpoint: Path,
                                                              tmp_path: Path) -> None:
    require_chromium()
    page = tmp_path / "report.html"
    out = io.StringIO()
    assert main(["report", str(checkpoint), "-o", str(page)], out=out) == 0
    assert "4 batch(es)" in out.getvalue()
    seen = visit(page.as_uri(), PLOTS_DRAWN)
    assert seen.errors == []
    assert seen.value == len(PLOTS)
    assert seen.screenshot.startswith(b"\x89PNG")
    shot = os.environ.get("DSTL_REPORT_SCREENSHOT")  # to look at it: a path to copy it to
    if shot:
        (tmp_path / "report.png").write_bytes(seen.screenshot)
        shutil.copy(tmp_path / "report.png", shot)


@pytest.mark.spark
def test_report_page_is_self_contained(checkpoint: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    main(["report", str(checkpoint), "-o", str(page)], out=io.StringIO())
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    assert "Not recorded" not in text


@pytest.mark.spark
def test_entries_without_recorded_metrics_still_plot_changelog_and_snapshots(
        checkpoint: Path) -> None:
    with ChangelogService(checkpoint.as_uri()) as storage:
        log = CommitLog(storage)
        entries = [log.read(b) for b in log.batch_ids()]
    old = [dataclasses.replace(e, extra={k: v for k, v in e.extra.items()
                                         if k not in ("metrics", "stage_seconds")})
           for e in entries]
    rows = batch_rows(old)
    assert [r.recorded for r in rows] == [False] * 4
    assert [r.metrics["changelog_bytes"] for r in rows] == [
        r.metrics["changelog_bytes"] for r in batch_rows(entries)]
    assert sum(r.metrics["snapshots_adopted"] for r in rows) == sum(
        r.metrics["snapshots_adopted"] for r in batch_rows(entries))
    text = render_report("file:///old", rows)
    assert text.count("Not recorded in these commit entries") == 5  # all but the snapshot plot
