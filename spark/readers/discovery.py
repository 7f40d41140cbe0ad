"""Whether PySpark's data source lookup finds this copy of pyspark_dstl.

PySpark registers the `DefaultSource` of top-level packages named `pyspark_*` that it lists on
`sys.path`, so `spark.read.format("dstl-state")` works by name in any session. Two installs
break that quietly: one PySpark cannot list (a default editable install is an import hook),
and a stale one it lists first (an older copy earlier on the path), whose reader then runs
instead of this code. The check runs once per process, when the switch is installed or a
query starts, and warns with what it found and the fix.
"""

from __future__ import annotations

import pkgutil
import sys
import warnings
from pathlib import Path

from pyspark_dstl.core.errors import DstlWarning

PACKAGE = "pyspark_dstl"
_checked = False


class StaleInstallWarning(DstlWarning):
    """PySpark's data source lookup does not find the pyspark_dstl this process runs."""


def discovery_problem() -> str | None:
    """What is wrong with how PySpark finds the `dstl-state` source, or None."""
    running = Path(str(sys.modules[PACKAGE].__file__)).resolve()  # this module's top package
    listed = [Path(info.module_finder.path) / PACKAGE / "__init__.py"
              for info in pkgutil.iter_modules()
              if info.name == PACKAGE and hasattr(info.module_finder, "path")]
    if not listed:
        return (f"{PACKAGE} ({running.parent}) is not in a directory PySpark's data source "
                f"lookup lists (an editable install made as an import hook), so "
                f"spark.read.format('dstl-state') fails in a session that did not call "
                f"read_state: reinstall with `pip install -e . --config-settings "
                f"editable_mode=strict` (or install the wheel), or call "
                f"pyspark_dstl.register_state_reader(spark) first")
    found = listed[0].resolve()
    if found != running:
        return (f"PySpark's data source lookup finds {PACKAGE} at {found.parent}, but this "
                f"process runs {running.parent}: a stale install hides this copy (its "
                f"dstl-state reader would run instead); uninstall it (`pip uninstall "
                f"pyspark-dstl`) and install this copy again")
    return None


def warn_if_undiscoverable() -> None:
    """Warn once per process (StaleInstallWarning) when the lookup would miss this copy."""
    global _checked
    if _checked:
        return
    _checked = True
    problem = discovery_problem()
    if problem is not None:
        warnings.warn(problem, StaleInstallWarning, stacklevel=3)
