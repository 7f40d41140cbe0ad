"""The README's benchmark paragraph is generated from benchmarks/results/*.json."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks.harness import RESULTS_DIR
from benchmarks.readme_figures import (
    COMMAND,
    END,
    START,
    load_results,
    main,
    render_paragraph,
    rewrite,
)
from tests.support.paths import REPO_ROOT

README = REPO_ROOT / "README.md"


def results_with(tmp_path: Path, *names: str, quick: str = "") -> Path:
    """A results directory holding only the named recorded files (`quick`: mark one quick)."""
    folder = tmp_path / "results"
    folder.mkdir()
    for name in names:
        shutil.copy(RESULTS_DIR / f"{name}.json", folder / f"{name}.json")
    if quick:
        path = folder / f"{quick}.json"
        data = json.loads(path.read_text())
        data["quick"] = True
        path.write_text(json.dumps(data))
    return folder


def stale_readme(tmp_path: Path) -> Path:
    path = tmp_path / "README.md"
    path.write_text(f"# x\n\n{START}\nMeasured long ago: 12.9x.\n{END}\n\nmore\n")
    return path


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_quotes_the_recorded_results() -> None:
    text = README.read_text(encoding="utf-8")
    assert rewrite(text, render_paragraph(load_results(RESULTS_DIR))) == text, (
        f"README.md's benchmark figures are stale: regenerate them with `{COMMAND}` "
        "from the repository root")


def test_the_checkpoint_figure_is_the_p99_of_the_largest_state_on_each_storage() -> None:
    data = json.loads((RESULTS_DIR / "checkpoint_duration.json").read_text())
    quoted = []
    for table in data["tables"][:2]:
        p99 = table["headers"].index("p99 ms")
        rows = [row for row in table["rows"] if row[0] == "5,000,000"]
        quoted += [f"{row[p99]:,.0f} ms" for row in rows
                   if row[1] in ("(a) changelog", "(b) incremental snapshot")]
    paragraph = one_line(render_paragraph(load_results(RESULTS_DIR)))
    assert len(quoted) == 4 and "at 5 million keys" in paragraph
    assert [figure in paragraph for figure in quoted] == [True] * 4


def test_a_benchmark_without_a_result_file_is_left_out(tmp_path: Path) -> None:
    paragraph = one_line(render_paragraph(load_results(results_with(tmp_path, "spark_e2e"))))
    assert re.search(r"runs [0-9.]+x \(per-key API\) and [0-9.]+x \(vectorized API\)", paragraph)
    assert "checkpoint" not in paragraph and "hedging" not in paragraph


def test_a_quick_run_is_not_quoted(tmp_path: Path) -> None:
    folder = results_with(tmp_path, "spark_e2e", "hedging", quick="hedging")
    paragraph = one_line(render_paragraph(load_results(folder)))
    assert "hedging" not in paragraph and "applyInPandasWithState" in paragraph


def test_check_mode_fails_on_a_stale_readme_naming_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--readme", str(stale_readme(tmp_path))]) == 1
    assert COMMAND in capsys.readouterr().err


def test_the_rewritten_readme_passes_the_check_and_keeps_the_rest(tmp_path: Path) -> None:
    readme = stale_readme(tmp_path)
    assert main(["--readme", str(readme)]) == 0
    assert main(["--check", "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "12.9x" not in text and text.startswith("# x\n") and text.endswith("\nmore\n")


def test_a_readme_without_the_markers_is_refused_naming_them(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nMeasured long ago.\n")
    with pytest.raises(SystemExit, match=START):
        main(["--readme", str(readme)])


def test_the_native_figure_is_the_vectorized_ratio_at_the_1e6_key_shape(tmp_path: Path) -> None:
    data = json.loads((RESULTS_DIR / "spark_e2e_1e6.json").read_text())
    table = data["tables"][0]
    row = next(r for r in table["rows"] if r[0] == "(a') dstl vectorized")
    expected = f"{row[table['headers'].index('rows/s vs (d)')]:.2f}x"
    paragraph = one_line(render_paragraph(load_results(results_with(tmp_path, "spark_e2e_1e6"))))
    assert f"over 1 million keys its vectorized API counts {expected} the rows per second" \
        in paragraph


def test_without_the_1e6_key_shape_the_native_figure_is_left_out(tmp_path: Path) -> None:
    paragraph = one_line(render_paragraph(load_results(results_with(tmp_path, "spark_e2e"))))
    assert "groupBy().count()" not in paragraph


def test_the_switch_figure_is_the_pandas_and_row_ratio_at_the_20k_shape(tmp_path: Path) -> None:
    data = json.loads((RESULTS_DIR / "spark_e2e_20k.json").read_text())
    table = next(t for t in data["tables"] if t["title"].startswith("The same PySpark"))
    ratio = table["headers"].index("rows/s ratio")
    expected = [f"{row[ratio]:.1f}x" for row in table["rows"][:2]]
    paragraph = one_line(render_paragraph(load_results(results_with(tmp_path, "spark_e2e_20k"))))
    assert (f"moved by `install()` runs {expected[0]} (pandas) and {expected[1]} (Rows) the rows "
            "per second of the same processor on Spark's own operator at 20,000 keys") \
        in paragraph
