"""The README's benchmark figures, written from benchmarks/results/*.json so they cannot drift.

    python -m benchmarks.readme_figures            # rewrite the paragraph in README.md
    python -m benchmarks.readme_figures --check    # exit 1 when the README is stale

The paragraph between `<!-- figures:start -->` and `<!-- figures:end -->` quotes a few numbers
of the recorded runs. A figure whose result file, table or row is missing (or whose run was a
`--quick` one) is left out of the sentence rather than written from memory.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT, RESULTS_DIR

COMMAND = "python -m benchmarks.readme_figures"
README = REPO_ROOT / "README.md"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"
WIDTH = 96
NO_BREAK = "\u00a0"  # joins a number to its unit while the paragraph is wrapped

Row = Mapping[str, Any]


def load_results(results: Path) -> dict[str, dict[str, Any]]:
    """Every recorded (not `--quick`) result file, by benchmark name."""
    found = {}
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not data.get("quick"):
            found[path.stem] = data
    return found


def table_rows(data: Mapping[str, Any] | None, title_prefix: str) -> list[Row]:
    """The rows of the first table whose title starts with `title_prefix`, keyed by header."""
    if data is None:
        return []
    for table in data.get("tables", []):
        if str(table.get("title", "")).startswith(title_prefix):
            return [dict(zip(table["headers"], row, strict=True)) for row in table["rows"]]
    return []


def find(rows: Sequence[Row], column: str, label: str) -> Row | None:
    return next((row for row in rows if row.get(column) == label), None)


def number(row: Row | None, column: str) -> float | None:
    value = None if row is None else row.get(column)
    return float(value) if isinstance(value, int | float) else None


def keys_count(row: Row) -> int:
    return int(str(row["keys"]).replace(",", ""))


def keys_text(count: int) -> str:
    return f"{count // 1_000_000} million" if count % 1_000_000 == 0 else f"{count:,}"


def ms(value: float) -> str:
    return f"{value:,.0f}{NO_BREAK}ms"


def switch_clause(found: Mapping[str, dict[str, Any]]) -> str | None:
    """Benchmark 6 at the 20k shape: a PySpark processor moved by the switch against the same
    processor on Spark's own operator, per API."""
    data = found.get("spark_e2e_20k")
    rows = table_rows(data, "The same PySpark processor")
    ratios = [(api, number(find(rows, "the switch", label), "rows/s ratio"))
              for api, label in (("pandas", "(s) the switch: transformWithStateInPandas"),
                                 ("Rows", "(s') the switch: transformWithState, Rows"))]
    shown = [f"{ratio:.1f}x ({api})" for api, ratio in ratios if ratio is not None]
    if data is None or not shown:
        return None
    return (f"a PySpark transformWithState query moved by `install()` runs {' and '.join(shown)} "
            f"the rows per second of the same processor on Spark's own operator at "
            f"{keys_text(int(data['config']['keys']))} keys per batch")


def spark_clause(found: Mapping[str, dict[str, Any]]) -> str | None:
    """Benchmark 6: the keyed count's rows/s against applyInPandasWithState, per API."""
    rows = table_rows(found.get("spark_e2e"), "Keyed running count")
    ratios = [(api, number(find(rows, "variant", label), "rows/s vs (b)"))
              for api, label in (("per-key API", "(a) dstl per-key"),
                                 ("vectorized API", "(a') dstl vectorized"))]
    shown = [f"{ratio:.1f}x ({api})" for api, ratio in ratios if ratio is not None]
    if not shown:
        return None
    return (f"a keyed running count in PySpark runs {' and '.join(shown)} faster than "
            "`applyInPandasWithState` on Spark's RocksDB state store")


def native_clause(found: Mapping[str, dict[str, Any]]) -> str | None:
    """Benchmark 6 at 1e6 keys: the vectorized count's rows/s against Spark's own JVM count."""
    data = found.get("spark_e2e_1e6")
    rows = table_rows(data, "Keyed running count")
    value = number(find(rows, "variant", "(a') dstl vectorized"), "rows/s vs (d)")
    if data is None or value is None:
        return None
    return (f"over {keys_text(int(data['config']['keys']))} keys its vectorized API counts "
            f"{value:.2f}x the rows per second of Spark's own `groupBy().count()` in the JVM")


def checkpoint_clause(found: Mapping[str, dict[str, Any]]) -> str | None:
    """Benchmark 1: checkpoint p99 at the largest state, changelog vs incremental snapshot."""
    data = found.get("checkpoint_duration")
    pairs = []  # (storage words, keys, changelog p99, snapshot p99)
    for storage, words in (("file://", "on local files"), ("s3://", "on a simulated S3")):
        rows = table_rows(data, f"Checkpoint duration on {storage}")
        if not rows:
            continue
        largest = max(keys_count(row) for row in rows)
        at_largest = [row for row in rows if keys_count(row) == largest]
        ours = number(find(at_largest, "mode", "(a) changelog"), "p99 ms")
        theirs = number(find(at_largest, "mode", "(b) incremental snapshot"), "p99 ms")
        if ours is not None and theirs is not None:
            pairs.append((words, largest, ours, theirs))
    if not pairs or len({keys for _, keys, _, _ in pairs}) != 1:
        pairs = pairs[:1]  # sizes differ between storages: quote one, never mix them
    if not pairs:
        return None
    ours_text = " and ".join(f"{ms(ours)} {words}" for words, _, ours, _ in pairs)
    theirs_text = " and ".join(ms(theirs) for _, _, _, theirs in pairs)
    return (f"at {keys_text(pairs[0][1])} keys a checkpoint's p99 is {ours_text} against "
            f"{theirs_text} for an incremental RocksDB snapshot per checkpoint")


def hedging_clause(found: Mapping[str, dict[str, Any]]) -> str | None:
    """Benchmark 2: the p99.9 cut by hedging and what it cost in extra requests."""
    data = found.get("hedging")
    cut = number(find(table_rows(data, "Latency cut by hedging"), "quantile", "p99.9"),
                 "lower by %")
    extra = number(find(table_rows(data, "Persist latency"), "hedging", "on"), "extra req %")
    if cut is None:
        return None
    cost = "" if extra is None else f" for {extra:.0f}% extra requests"
    return f"hedging cuts the p99.9 of uploads to a heavy-tailed S3 by {cut:.0f}%{cost}"


CLAUSES: tuple[Callable[[Mapping[str, dict[str, Any]]], str | None], ...] = (
    switch_clause, spark_clause, native_clause, checkpoint_clause, hedging_clause)


def render_paragraph(found: Mapping[str, dict[str, Any]]) -> str:
    """The paragraph, wrapped as the README is; only the figures the results hold."""
    clauses = [text for clause in CLAUSES if (text := clause(found)) is not None]
    lead = ("Measured side by side on a 2-core machine ([docs/benchmarks.md](docs/benchmarks.md), "
            "one command each)")
    body = f"{lead}: {'; '.join(clauses)}." if clauses else f"{lead}."
    text = f"{body} The same page says where the goals were missed and why."
    wrapped = textwrap.fill(text, width=WIDTH, break_long_words=False, break_on_hyphens=False)
    return wrapped.replace(NO_BREAK, " ")


def rewrite(readme_text: str, paragraph: str, where: str = "README.md") -> str:
    """`readme_text` with the text between the markers replaced by `paragraph`."""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if len(pattern.findall(readme_text)) != 1:
        raise SystemExit(f"{where}: needs exactly one {START} ... {END} pair around the "
                         f"benchmark paragraph; add the markers, then run `{COMMAND}`")
    return pattern.sub(lambda _: f"{START}\n{paragraph}\n{END}", readme_text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", default=str(README), help="the README to rewrite")
    parser.add_argument("--results", default=str(RESULTS_DIR),
                        help="directory of the recorded result files")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when the README differs from the results")
    args = parser.parse_args(argv)
    readme = Path(args.readme)
    current = readme.read_text(encoding="utf-8")
    text = rewrite(current, render_paragraph(load_results(Path(args.results))), str(readme))
    if args.check:
        if current != text:
            print(f"{readme}: benchmark figures are stale; regenerate them with `{COMMAND}`",
                  file=sys.stderr)
            return 1
        return 0
    readme.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
