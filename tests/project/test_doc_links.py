"""The pages hold together: every relative link between the README, CONTRIBUTING.md and docs/
reaches a file and, when it names one, a heading of that file (GitHub's anchors), so moving a
section cannot strand a link; an example shown on two pages is the same on both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", REPO_ROOT / "CHANGELOG.md",
                *(REPO_ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        if match := re.match(r"^#{1,6} (.+)$", line):
            base = anchor = slug(match.group(1))
            count = 0
            while anchor in found:  # GitHub numbers repeated headings
                count += 1
                anchor = f"{base}-{count}"
            found.add(anchor)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{target}: no file {path_part}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_of_the_page_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_link_to_a_missing_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Output modes\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#output-modes), [gone](other.md#time), [none](missing.md)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["other.md#time: no heading #time in other.md",
                                  "missing.md: no file missing.md"]


def test_anchors_follow_githubs_rule_for_code_and_punctuation() -> None:
    assert slug("Object storage: S3 (`spark.dstl.changelog.s3.*`)") == (
        "object-storage-s3-sparkdstlchangelogs3")
    assert slug("In Spark's progress reports") == "in-sparks-progress-reports"


def first_python_block(page: Path) -> str:
    return page.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]


def test_getting_started_shows_the_readme_query_that_test_examples_runs() -> None:
    """The drop-in example of docs/getting-started.md is the README's, which
    tests/project/test_examples.py runs as written; a copy that drifted would be untested."""
    assert first_python_block(REPO_ROOT / "docs" / "getting-started.md") == (
        first_python_block(REPO_ROOT / "README.md"))
