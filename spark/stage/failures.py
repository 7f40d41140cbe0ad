"""Errors from inside a stateful task that read first: the culprit on line one, then the
original traceback once.

In the task, a failure becomes a StatefulTaskError whose message starts with one line naming
the processor, the key being processed (when there is one), the batch and the state
partition, and goes on with the original traceback. Spark carries that text to the driver
inside a PythonException, which the driver (`stage_errors`) and the started query
(`builder/started_query.py`) turn back into the StatefulTaskError alone, so the long Py4J and
foreachBatch wrapping with its repeated copies of the cause is not what the user reads first.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark_dstl.spark.spark_errors import DstlSparkError

KEY_ATTRIBUTE = "_dstl_key"
# where Spark's own text starts after a Python traceback it carries
_SPARK_TRAILERS = ("\n SQLSTATE:", "\n=== Streaming Query ===", "\n\nJVM stacktrace:")


class StatefulTaskError(DstlSparkError):
    """A processor or the state backend failed in a stateful task. The first line names the
    culprit (processor, key, batch, state partition); the task's traceback follows."""


def note_key(error: BaseException, key_columns: Sequence[str], key: Any) -> None:
    """Remember on `error` which key the processor was handling when it was raised."""
    if not hasattr(error, KEY_ATTRIBUTE):
        values = key if isinstance(key, tuple) else (key,)
        text = ", ".join(f"{name}={value!r}"
                         for name, value in zip(key_columns, values, strict=False))
        with contextlib.suppress(AttributeError):  # __slots__: no key, still the error
            setattr(error, KEY_ATTRIBUTE, text)


def task_failure(error: BaseException, processor: Any, batch_id: int,
                 partition: int | None) -> StatefulTaskError:
    """The error a task raises instead of `error` (raise it `from None`)."""
    where = [f"batch {batch_id}"]
    if partition is not None:
        where.append(f"state partition {partition}")
    key = getattr(error, KEY_ATTRIBUTE, None)
    subject = f"{type(processor).__name__} on key ({key})" if key else \
        f"{type(processor).__name__}"
    summary = str(error).splitlines()[0] if str(error) else ""
    first = (f"{subject} failed in {', '.join(where)}: {type(error).__name__}"
             + (f": {summary}" if summary else ""))
    trace = "".join(traceback.format_exception(error)).rstrip()
    return StatefulTaskError(f"{first}\n{trace}")


_QUALIFIED = f"{StatefulTaskError.__module__}.{StatefulTaskError.__qualname__}: "


def task_error_text(message: str) -> str | None:
    """The StatefulTaskError message inside the text of an error Spark raised, if any."""
    start = message.rfind(_QUALIFIED)
    if start < 0:
        return None
    text = message[start + len(_QUALIFIED):]
    ends = [text.find(trailer) for trailer in _SPARK_TRAILERS if trailer in text]
    return (text[:min(ends)] if ends else text).rstrip()


@contextlib.contextmanager
def stage_errors(query_stopped: bool = False) -> Iterator[None]:
    """Around the action that runs the stateful stage (or waits on the query running it): a
    task's StatefulTaskError comes out as itself, not wrapped in Spark's exception; with
    `query_stopped`, a note says the query stopped and where Spark's full report is."""
    try:
        yield
    except Exception as exc:
        text = task_error_text(str(exc))
        if text is None:
            raise
        error = StatefulTaskError(text)
        if query_stopped:
            error.add_note(f"the streaming query stopped: {type(exc).__name__} "
                           f"(StatefulQuery.query.exception() has Spark's full report)")
        raise error from None
