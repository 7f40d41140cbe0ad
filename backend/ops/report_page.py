"""`report`: one self-contained HTML page of plots over a checkpoint's committed batches.

Everything comes from the checkpoint's own commit entries: the StoreCommit of every store
(changelog bytes, snapshots) and, for entries written since the metrics were recorded, the
batch's metrics (`extra["metrics"]`, the names of docs/metrics.md). Plots are inline SVG drawn
here, with no script and nothing fetched, so the page opens anywhere, offline.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.batch_metrics import snapshot_measures
from pyspark_dstl.materializer.remote import RemoteFiles

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 40


@dataclass
class BatchRow:
    """One committed batch: what its entry records, recorded metrics or not."""

    batch_id: int
    created_ms: int
    metrics: dict[str, float] = field(default_factory=dict)
    recorded: bool = False  # the entry carries the batch's metrics (newer entries)


def batch_rows(entries: Sequence[CommitEntry]) -> list[BatchRow]:
    """Rows in batch order; changelog and snapshot figures come from the infos themselves, so
    entries written before metrics were recorded still plot those."""
    rows: list[BatchRow] = []
    previous: dict[str, Mapping[int, StoreCommit]] = {}
    for entry in sorted(entries, key=lambda e: e.batch_id):
        recorded = dict(entry.extra.get("metrics") or {})
        if "stage_seconds" in entry.extra:
            recorded["stage_seconds"] = entry.extra["stage_seconds"]
        derived: dict[str, float] = {}
        for name, commit in entry.operators.items():
            snaps = snapshot_measures(commit.stores, previous.get(name, {}))
            for key, value in snaps.items():
                derived[key] = derived.get(key, 0) + value
            derived["changelog_bytes"] = derived.get("changelog_bytes", 0) + sum(
                info.changelog.size for info in commit.stores.values())
            previous[name] = commit.stores
        rows.append(BatchRow(entry.batch_id, entry.created_ms,
                             {**derived, **{k: float(v) for k, v in recorded.items()}},
                             bool(recorded)))
    return rows


def read_batches(storage: RemoteFiles) -> list[BatchRow]:
    log = CommitLog(storage)
    return batch_rows([log.read(batch_id) for batch_id in log.batch_ids()])


# --- plots -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plot:
    title: str
    unit: str
    series: Mapping[str, str]  # label -> metric name
    stacked: bool = False


PLOTS = (
    Plot("Commit latency (slowest task)", "s",
         {"commit": "commit_seconds", "load": "load_seconds", "stage": "stage_seconds"}),
    Plot("Changelog and snapshot bytes", "bytes",
         {"durable changelog since the snapshot": "changelog_bytes",
          "uploaded (changelog and snapshot files)": "upload_bytes",
          "snapshot uploaded": "snapshot_bytes"}),
    Plot("State rows (RocksDB's estimate)", "rows", {"state rows": "state_rows_estimate"}),
    Plot("State size", "bytes", {"disk bytes": "disk_bytes", "memory bytes": "memory_bytes"}),
    Plot("Load kinds (partitions per batch)", "partitions", {}, stacked=True),
    Plot("Uploads and hedging", "requests",
         {"requests": "upload_requests", "retries": "upload_retries",
          "hedges started": "upload_hedges_started", "hedges won": "upload_hedges_won"}),
)


def _series_of(plot: Plot, rows: Sequence[BatchRow]) -> dict[str, list[float | None]]:
    if plot.stacked:  # load kinds: every loads_* metric any batch recorded
        kinds = sorted({k for r in rows for k in r.metrics if k.startswith("loads_")})
        return {k.removeprefix("loads_"): [r.metrics.get(k, 0.0) if r.recorded else None
                                           for r in rows] for k in kinds}
    return {label: [r.metrics.get(name) for r in rows] for label, name in plot.series.items()}


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes" or (abs(value) >= 1024 and unit != "s"):
        for suffix in ("", "K", "M", "G", "T"):
            if abs(value) < 1024 or suffix == "T":
                return f"{value:.0f}{suffix}" if suffix == "" else f"{value:.1f}{suffix}"
            value /= 1024
    if unit == "s":
        return f"{value:.3g}s"
    return f"{value:.3g}"


def svg_plot(plot: Plot, batch_ids: Sequence[int],
             series: Mapping[str, Sequence[float | None]]) -> str:
    """An SVG chart: lines (or stacked bars) over batch ids, y from 0, with a legend."""
    present = {k: v for k, v in series.items() if any(x is not None for x in v)}
    if not batch_ids or not present:
        return ('<p class="missing">Not recorded in these commit entries (written before '
                'pyspark-dstl recorded batch metrics).</p>')
    if plot.stacked:
        totals = [sum(v[i] or 0.0 for v in present.values()) for i in range(len(batch_ids))]
        top = max(totals)
    else:
        top = max(x for v in present.values() for x in v if x is not None)
    frame = _Frame(batch_ids, top or 1.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{WIDTH}" '
             f'height="{HEIGHT + 20 * len(present)}" role="img" '
             f'aria-label="{html.escape(plot.title)}">', *_axes(frame, plot.unit)]
    base = [0.0] * len(batch_ids)
    for index, (label, values) in enumerate(present.items()):
        color = COLORS[index % len(COLORS)]
        if plot.stacked:
            parts += _stacked_bars(frame, label, values, color, base)
        else:
            parts += _line(frame, label, values, color, plot.unit)
        legend_y = HEIGHT + 20 * index + 4
        parts.append(f'<rect x="{LEFT}" y="{legend_y}" width="12" height="12" '
                     f'fill="{color}"/><text x="{LEFT + 18}" y="{legend_y + 11}" '
                     f'class="legend">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


class _Frame:
    """Where a batch and a value land in the plot: one band per batch id, y from 0 to top."""

    def __init__(self, batch_ids: Sequence[int], top: float) -> None:
        self.batch_ids = batch_ids
        self.top = top
        self.inner_w, self.inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
        self.lo, self.hi = batch_ids[0], batch_ids[-1]
        self.span = max(1, self.hi - self.lo)
        self.band = self.inner_w / (self.span + 1)  # the point or bar in the band's middle

    def x_of(self, batch: int) -> float:
        return LEFT + (batch - self.lo + 0.5) * self.band

    def y_of(self, value: float) -> float:
        return TOP + self.inner_h - value / self.top * self.inner_h


def _axes(frame: _Frame, unit: str) -> list[str]:
    """Both axes, three value ticks with grid lines, and batch ticks."""
    bottom, right = TOP + frame.inner_h, LEFT + frame.inner_w
    parts = [f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#444"/>']
    for fraction in (0.0, 0.5, 1.0):
        y = frame.y_of(frame.top * fraction)
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
                     f'class="tick">{html.escape(_fmt(frame.top * fraction, unit))}</text>')
        if fraction:
            parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" '
                         f'stroke="#ddd"/>')
    ticks = (frame.batch_ids if len(frame.batch_ids) <= 12
             else sorted({frame.lo, frame.hi, frame.lo + frame.span // 2}))
    for batch in ticks:
        parts.append(f'<text x="{frame.x_of(batch):.1f}" y="{bottom + 16}" '
                     f'text-anchor="middle" class="tick">{batch}</text>')
    parts.append(f'<text x="{LEFT + frame.inner_w / 2}" y="{bottom + 32}" '
                 f'text-anchor="middle" class="tick">batch</text>')
    return parts


def _stacked_bars(frame: _Frame, label: str, values: Sequence[float | None], color: str,
                  base: list[float]) -> list[str]:
    """One series' bars, stacked on `base` (which it raises)."""
    bar = max(1.0, min(frame.band * 0.7, 40.0))
    parts = []
    for i, (batch, value) in enumerate(zip(frame.batch_ids, values, strict=True)):
        if not value:
            continue
        y_top, y_bottom = frame.y_of(base[i] + value), frame.y_of(base[i])
        parts.append(f'<rect x="{frame.x_of(batch) - bar / 2:.1f}" y="{y_top:.1f}" '
                     f'width="{bar:.1f}" height="{y_bottom - y_top:.1f}" '
                     f'fill="{color}"><title>batch {batch}: {label} '
                     f'{value:g}</title></rect>')
        base[i] += value
    return parts


def _line(frame: _Frame, label: str, values: Sequence[float | None], color: str,
          unit: str) -> list[str]:
    """One series as a line with a point (and its value as a tooltip) per recorded batch."""
    points = [(frame.x_of(b), frame.y_of(v), b, v)
              for b, v in zip(frame.batch_ids, values, strict=True) if v is not None]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
    return [f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>',
            *(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"><title>batch '
              f'{b}: {html.escape(label)} {html.escape(_fmt(v, unit))}</title></circle>'
              for x, y, b, v in points)]


STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.tick { font-size: 11px; fill: #444; } .legend { font-size: 12px; fill: #222; }
.missing { color: #a33; } table { border-collapse: collapse; font-size: 12px; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
"""


def render_report(url: str, rows: Sequence[BatchRow]) -> str:
    """The whole page as one string."""
    batch_ids = [r.batch_id for r in rows]
    recorded = sum(1 for r in rows if r.recorded)
    title = f"pyspark-dstl checkpoint report: {url}"
    body = [f"<h1>{html.escape(title)}</h1>"]
    if rows:
        first = dt.datetime.fromtimestamp(rows[0].created_ms / 1000, dt.UTC)
        last = dt.datetime.fromtimestamp(rows[-1].created_ms / 1000, dt.UTC)
        body.append(f"<p>{len(rows)} committed batch(es), {batch_ids[0]}..{batch_ids[-1]}, "
                    f"committed {first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC; "
                    f"{recorded} record their metrics.</p>")
    else:
        body.append("<p>No committed batch: nothing to plot.</p>")
    for plot in PLOTS:
        body.append(f"<h2>{html.escape(plot.title)}</h2>")
        body.append(svg_plot(plot, batch_ids, _series_of(plot, rows)))
    body.append(_latest_table(rows))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def _latest_table(rows: Sequence[BatchRow]) -> str:
    if not rows:
        return ""
    last = rows[-1]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{v:g}</td></tr>"
                    for k, v in sorted(last.metrics.items()))
    return f"<h2>Metrics of batch {last.batch_id}</h2><table>{cells}</table>"


def write_report(storage: RemoteFiles, url: str, path: str) -> int:
    """Write the page for the checkpoint behind `storage` to `path`; the number of batches."""
    rows = read_batches(storage)
    with open(path, "w", encoding="utf-8") as out:
        out.write(render_report(url, rows))
    return len(rows)

