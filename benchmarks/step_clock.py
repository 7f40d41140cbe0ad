"""Timing named steps of the library while it runs in this process, by wrapping them.

The in-process benchmarks (timer_task, perkey_task) replace each step (a method or function
named by its owner and attribute) with a timed wrapper for as long as `installed` lasts, and
put the original back afterwards, so the library's code is measured unchanged.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

Step = tuple[str, Any, str]
"""(label, owner, attribute): what is timed, under which label."""


class StepClock:
    """Adds up the time spent in the wrapped steps while `installed`; subclasses say what
    a wrapper measures (`wrap`) and how a step is replaced (`replacement`)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._steps = tuple(steps)

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError

    def replacement(self, label: str, owner: Any, attribute: str, original: Any) -> Any:
        """What stands in for `original` (as found on `owner`, descriptors unresolved)."""
        return self.wrap(label, original)

    @contextmanager
    def installed(self) -> Iterator[StepClock]:
        with ExitStack() as restore:
            for label, owner, attribute in self._steps:
                original = inspect.getattr_static(owner, attribute, None)
                if original is None:  # a step this version of the code does not have
                    continue
                setattr(owner, attribute, self.replacement(label, owner, attribute, original))
                restore.callback(setattr, owner, attribute, original)
            yield self

    def take(self) -> dict[str, float]:
        """The seconds added up since the last take, by label."""
        taken = dict(self.seconds)
        self.seconds.clear()
        return taken
