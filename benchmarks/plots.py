"""The PNG plots of docs/benchmarks.md (matplotlib, no display needed)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.harness import Report

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _pyplot() -> Any:
    """matplotlib on its file-only backend, imported when a plot is drawn (it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(report: Report, figure: Any, suffix: str = "") -> None:
    path = report.image_path(suffix)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    print(f"plot: {path}")


def checkpoint_plots(report: Report, series: Mapping[str, Mapping[int, Mapping[str, list[float]]]],
                     labels: Mapping[str, str]) -> None:
    """p50/p99 vs state size per storage, and every checkpoint of the largest size."""
    kinds = list(series)
    if not kinds:
        return
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.5), squeeze=False)
    for axis, kind in zip(axes[0], kinds, strict=True):
        sizes = sorted(series[kind])
        for color, mode in zip(COLORS, labels, strict=False):
            p50 = [np.percentile(series[kind][s][mode], 50) * 1000 for s in sizes]
            p99 = [np.percentile(series[kind][s][mode], 99) * 1000 for s in sizes]
            axis.plot(sizes, p50, "o-", color=color, label=f"{labels[mode]} p50")
            axis.plot(sizes, p99, "s--", color=color, label=f"{labels[mode]} p99")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("keys in state (100-byte values)")
        axis.set_ylabel("checkpoint duration (ms)")
        axis.set_title(f"{kind}:// - 1% of keys changed per checkpoint")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    _save(report, figure)
    figure, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.0), squeeze=False)
    for axis, kind in zip(axes[0], kinds, strict=True):
        size = max(series[kind])
        for color, mode in zip(COLORS, labels, strict=False):
            values = [v * 1000 for v in series[kind][size][mode]]
            axis.plot(range(1, len(values) + 1), values, ".-", color=color, label=labels[mode])
        axis.set_yscale("log")
        axis.set_xlabel("checkpoint")
        axis.set_ylabel("duration (ms)")
        axis.set_title(f"{kind}:// - every checkpoint at {size:,} keys")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    _save(report, figure, "_series")


def cdf_plot(report: Report, samples: Mapping[str, Sequence[float]], title: str,
             xlabel: str) -> None:
    """Latency distributions as 1 - CDF on log axes, so the tail is visible."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for color, (label, values) in zip(COLORS, samples.items(), strict=False):
        ordered = np.sort(np.asarray(values, dtype=float)) * 1000
        survival = 1.0 - np.arange(len(ordered)) / len(ordered)
        axis.step(ordered, survival, where="post", color=color, label=label)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel(xlabel)
    axis.set_ylabel("fraction of requests slower (1 - CDF)")
    axis.set_title(title, fontsize=9)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    _save(report, figure)


def bar_plot(report: Report, groups: Sequence[str], bars: Mapping[str, Sequence[float]],
             title: str, ylabel: str, errors: Mapping[str, Sequence[float]] | None = None,
             suffix: str = "", log: bool = False) -> None:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    width = 0.8 / max(1, len(bars))
    positions = np.arange(len(groups))
    for index, (color, (label, values)) in enumerate(zip(COLORS, bars.items(), strict=False)):
        yerr = None if errors is None else errors.get(label)
        container = axis.bar(positions + index * width, values, width, color=color,
                             label=label, yerr=yerr, capsize=3)
        axis.bar_label(container, fmt=_short, fontsize=7)
    labels = [textwrap.fill(group, 16) for group in groups]
    axis.set_xticks(positions + width * (len(bars) - 1) / 2, labels, fontsize=8)
    if log:
        axis.set_yscale("log")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend()
    _save(report, figure, suffix)


def _short(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def line_plot(report: Report, x: Sequence[float], lines: Mapping[str, Sequence[float]],
              title: str, xlabel: str, ylabel: str, hline: float | None = None,
              hline_label: str = "", suffix: str = "") -> None:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for color, (label, values) in zip(COLORS, lines.items(), strict=False):
        axis.plot(x[:len(values)], values, "-", color=color, label=label)
    if hline is not None:
        axis.axhline(hline, color="black", linestyle=":", label=hline_label)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend()
    _save(report, figure, suffix)
