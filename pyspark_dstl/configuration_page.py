"""docs/configuration.md, written from the option declarations so the page cannot drift.

    python -m pyspark_dstl.configuration_page            # rewrite docs/configuration.md
    python -m pyspark_dstl.configuration_page --check    # exit 1 when the page is stale

It lives in the backend because it is the one package that sees every settings class.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark_dstl.backend.backend_settings import BackendSettings, FencingSettings
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage.storage_settings import StorageSettings
from pyspark_dstl.core.settings import Settings, markdown_table
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.spark.query_settings import QuerySettings

COMMAND = "python -m pyspark_dstl.configuration_page"
DEFAULT_PATH = "docs/configuration.md"

INTRO = f"""\
<!-- Generated from the option declarations by `{COMMAND}`; edit the code, not this page. -->
# Configuration reference

Every setting lives under `spark.dstl.`. In a Spark job they are read from the Spark conf on the
driver when the query starts, validated (an invalid value fails the query with the key named),
and shipped to the executors with the tasks. Outside Spark the same keys are accepted by
`BackendSettings.from_mapping(mapping)`, `ChangelogSettings.from_mapping(mapping)`,
`MaterializerSettings.from_mapping(mapping)` and `StorageSettings.from_mapping(mapping)`
(values may be strings or Python values), or the frozen dataclasses can be built directly
(field names in parentheses) and are held to the same bounds.

Durations are written as Spark writes them: `10ms`, `2s`, `5min`, `1h` (a bare number means
seconds). Sizes: `512k`, `10MB`, `1g` (binary units; a bare number means bytes). Booleans:
`true`/`false`. Where the type says "or `off`", `off` (or `none`, or blank) switches the option
off.

An unknown key under `spark.dstl.` is an error, not a silent no-op, so a typo cannot leave a
setting at its default unnoticed.

Outside Spark, `from_mapping(mapping, env=os.environ)` also reads environment variables named
after the full key: upper-cased, every `.` an `_` (`spark.dstl.changelog.persistDelay` is
`SPARK_DSTL_CHANGELOG_PERSISTDELAY`). A key in the mapping wins over its variable, and an
unknown variable under the section's name is an error like an unknown key. Spark jobs do not
read them: driver and executors must see the same settings.
"""


@dataclass(frozen=True)
class Group:
    """One section of the page: a heading, an optional intro, and one settings class."""

    heading: str
    settings: type[Settings]
    intro: str = ""


GROUPS = (
    Group("State store (`spark.dstl.stateStore.*`, `spark.dstl.rocksdb.*`)", BackendSettings),
    Group("Changelog: the durable short-term log (`spark.dstl.changelog.*`)", ChangelogSettings),
    Group("Object storage: S3 (`spark.dstl.changelog.s3.*`)", StorageSettings,
          "How the changelog, and the snapshots and commit log that share its storage, reach "
          "`s3://` (and `s3a://`) URLs. Other URLs (`file://`, paths, `memory://`, other fsspec "
          "protocols) need no settings."),
    Group("Materialization: RocksDB snapshots (`spark.dstl.materialization.*`)",
          MaterializerSettings),
    Group("One writer per checkpoint (`spark.dstl.fencing.*`)", FencingSettings,
          "A run holds its checkpoint through an epoch and a lease renewed in the background; "
          "see [operations.md](operations.md) for takeover."),
    Group("Streaming query (`spark.dstl.query.*`)", QuerySettings,
          "Read on the driver only; see [api.md](api.md#configuration) for how a query uses them."),
)


def render() -> str:
    """The whole page."""
    parts = [INTRO]
    for group in GROUPS:
        parts.append(f"\n## {group.heading}\n\n")
        if group.intro:
            parts.append(group.intro + "\n\n")
        parts.append(markdown_table(group.settings))
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("path", nargs="?", default=DEFAULT_PATH,
                        help=f"the page to write (default: {DEFAULT_PATH})")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when the page differs from the code")
    args = parser.parse_args(argv)
    page = Path(args.path)
    text = render()
    if args.check:
        current = page.read_text(encoding="utf-8") if page.exists() else ""
        if current != text:
            print(f"{page}: stale; regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
