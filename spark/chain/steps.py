"""`ChainedSteps`: the steps written after the first stateful step, as they are written.

Both entry points build a chain with it: the switch's stand-in DataFrame (`switch/frame.py`)
and the builder's stream (`builder/stateful_stream.py`). It keeps the output of the last
stateful step as a template (an empty batch DataFrame of its schema, watermark metadata
included), the stateless steps written since (replayed on each batch's output), and the
planned stateful steps (`ChainLink`s); each call returns a new value, as DataFrames do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark_dstl.spark.chain.links import ChainLink
from pyspark_dstl.spark.chain.planning import (
    StepInput,
    event_time_column,
    plan_aggregation,
    plan_deduplication,
    plan_transform_step,
    watermark_delay_ms,
    with_event_time,
)
from pyspark_dstl.spark.spark_errors import ChainedStepError
from pyspark_dstl.spark.time.modes import PROCESSING_TIME

Stateless = Callable[[Any], Any]


@dataclass(frozen=True)
class ChainedSteps:
    entry: str  # the first step's call (transformWithStateInPandas, process, ...)
    template: Any
    links: tuple[ChainLink, ...] = ()
    steps: tuple[Stateless, ...] = ()  # stateless steps since the last stateful step
    swallowed: bool = False  # an earlier step passes no watermark on
    redefined_watermark: str | None = None  # a withWatermark among `steps` (its text)

    @classmethod
    def after(cls, source: Any, output_schema: Any, event_time: str | None, time_mode: str,
              entry: str) -> ChainedSteps:
        """The chain after a first stateful step over `source` with `output_schema`;
        `event_time`: its eventTimeColumnName, which inherits the delay of `source`'s
        watermark."""
        incoming = event_time_column(source.schema)
        delay = watermark_delay_ms(source.schema, incoming) if incoming else None
        template = with_event_time(source.sparkSession, output_schema, event_time, delay)
        return cls(entry, template, swallowed=time_mode == PROCESSING_TIME)

    # --- stateless steps ---------------------------------------------------------------------

    def then(self, step: Stateless, *, redefines_watermark: str | None = None) -> ChainedSteps:
        """The chain with a stateless step on each batch's output (tried on the template now,
        so a wrong column fails here, as in Spark)."""
        return replace(self, template=step(self.template), steps=(*self.steps, step),
                       redefined_watermark=self.redefined_watermark or redefines_watermark)

    def finish(self, output: Any) -> Any:
        """A batch's output of the last stateful step after the stateless steps since it."""
        for step in self.steps:
            output = step(output)
        return output

    # --- stateful steps ----------------------------------------------------------------------

    def aggregate(self, columns: Sequence[Any], exprs: Sequence[Any], label: str
                  ) -> ChainedSteps:
        return self._add(plan_aggregation(self._input(label), columns, exprs, label))

    def deduplicate(self, subset: Sequence[str] | None, within_watermark: bool, label: str
                    ) -> ChainedSteps:
        return self._add(plan_deduplication(self._input(label), subset, within_watermark,
                                            label))

    def transform(self, key_columns: tuple[str, ...], rows_as: str,
                  arguments: Mapping[str, Any], label: str) -> ChainedSteps:
        return self._add(plan_transform_step(self._input(label), key_columns, rows_as,
                                             arguments, label))

    @property
    def has_aggregation(self) -> bool:
        return any(link.is_aggregation for link in self.links)

    def _input(self, label: str) -> StepInput:
        if self.redefined_watermark is not None:
            raise ChainedStepError(
                f"{label} after {self.redefined_watermark}: Redefining watermark is disallowed "
                f"after a stateful step (Spark fails such a query too): the stateful steps "
                f"after the first one use the watermark of the query's input, carried on by "
                f"eventTimeColumnName; drop the withWatermark call")
        return StepInput(self.template, _composed(self.steps), self.swallowed, self.entry)

    def _add(self, link: ChainLink) -> ChainedSteps:
        return ChainedSteps(self.entry, link.template, (*self.links, link), (),
                            self.swallowed or link.swallows_watermark)


def _composed(steps: tuple[Stateless, ...]) -> Stateless:
    if not steps:
        return _same
    return functools.partial(_apply_all, steps)


def _same(frame: Any) -> Any:
    return frame


def _apply_all(steps: tuple[Stateless, ...], frame: Any) -> Any:
    for step in steps:
        frame = step(frame)
    return frame
