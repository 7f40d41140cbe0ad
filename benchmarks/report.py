"""Writes the measured numbers of benchmarks/results/*.json into docs/benchmarks.md.

The prose of docs/benchmarks.md is written by hand; every table in it comes from the JSON
files through this script, between `<!-- BEGIN <section> -->` and `<!-- END <section> -->`
markers, so a number in the document is always the number of the recorded run.

    python -m benchmarks.report
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import IMG_DIR, REPO_ROOT, RESULTS_DIR, fmt

DOC = REPO_ROOT / "docs" / "benchmarks.md"
BENCHMARKS = ("checkpoint_duration", "hedging", "write_path", "recovery", "space", "spark_e2e",
              "spark_e2e_1e6", "spark_e2e_20k", "spark_timers", "spark_output", "rescale",
              "rescale_1e7", "rescale_1e7_s3", "breakdown", "perkey_task", "change_feed",
              "spark_chain", "worker_gc")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_indented(fmt(v)) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _indented(cell: str) -> str:
    """A cell's leading spaces (a row that is part of the row above) survive Markdown."""
    text = cell.lstrip(" ")
    return "&nbsp;" * (len(cell) - len(text)) + text


def load(results: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for name in BENCHMARKS:
        path = results / f"{name}.json"
        if path.exists():
            found[name] = json.loads(path.read_text())
    return found


def render_benchmark(name: str, data: dict[str, Any] | None, img_dir: Path) -> str:
    if data is None:
        return (f"*Not measured yet: run `python -m benchmarks.{name}`, then "
                f"`python -m benchmarks.report`.*")
    machine = data["machine"]
    parts = [f"Command: `{data['command']}`  ",
             f"Run: finished {str(data.get('finished_utc', '?')).replace('+00:00', '')} UTC, "
             f"{data.get('elapsed_seconds', '?')} s, "
             f"load average {machine['load_average'][0]} at the start and "
             f"{(data.get('load_average_at_end') or ['?'])[0]} at the end (2 cores), "
             f"code at commit {machine.get('git_commit') or '?'}."
             + (" **Quick configuration, not a result.**" if data.get("quick") else "")]
    for table in data["tables"]:
        parts.append(f"**{table['title']}**\n\n" + md_table(table["headers"], table["rows"]))
    for suffix in ("", "_series"):
        image = img_dir / f"{name}{suffix}.png"
        if image.exists():
            parts.append(f"![{name}{suffix}](img/{image.name})")
    if data["notes"]:
        parts.append("Notes from the run:\n\n" + "\n".join(f"- {n}" for n in data["notes"]))
    return "\n\n".join(parts)


def render_summary(found: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name in BENCHMARKS:
        data = found.get(name)
        if data is None:
            rows.append([name, "(not measured yet)", "", "", ""])
            continue
        for goal in data["goals"]:
            value = goal["ratio"]
            rows.append([goal["benchmark"], goal["goal"], goal["measured"],
                         "n/a" if value is None else f"{value:.2f}",
                         "yes" if goal["met"] else "**no**"])
    return md_table(["benchmark", "goal", "measured", "ratio", "met?"], rows)


def render_machine(found: dict[str, dict[str, Any]]) -> str:
    if not found:
        return "*No results yet.*"
    machine = next(iter(found.values()))["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items() if v)
    return "\n".join([
        f"- CPU: {machine['nproc']} cores ({machine['cpu']}), memory {machine['memory_gb']} GB",
        f"- OS: {machine['os']}",
        f"- Python {machine['python']}; Java: {machine['java']}",
        f"- Packages: {packages}",
        "- Code: the commit each run measured is named with the run",
    ])


def replace_section(text: str, section: str, content: str) -> str:
    begin, end = f"<!-- BEGIN {section} -->", f"<!-- END {section} -->"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOC}: no markers for section {section!r}")
    return pattern.sub(lambda _: f"{begin}\n{content}\n{end}", text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", default=str(RESULTS_DIR))
    parser.add_argument("--img-dir", default=str(IMG_DIR))
    parser.add_argument("--doc", default=str(DOC))
    args = parser.parse_args(argv)
    found = load(Path(args.results))
    doc = Path(args.doc)
    text = doc.read_text()
    text = replace_section(text, "machine", render_machine(found))
    summary = render_summary(found)
    text = replace_section(text, "summary", summary)
    text = replace_section(text, "closing", summary)
    for name in BENCHMARKS:
        text = replace_section(text, name, render_benchmark(name, found.get(name),
                                                            Path(args.img_dir)))
    doc.write_text(text)
    print(f"updated {doc} from {len(found)} result file(s)")


if __name__ == "__main__":
    main()
