"""The one exception root and the one warning root of pyspark-dstl, and the configuration
error every package raises.

Each package derives its own errors from `DstlError` (changelog: `ChangelogError`, materializer:
`MaterializerError`, backend: `BackendError`, spark: `DstlSparkError`), so a caller that wants
"anything this library raised" catches one type, and a caller that wants one package's failures
catches that root. Every warning derives from `DstlWarning`, so one filter silences or raises
all of them.
"""

from __future__ import annotations


class DstlError(Exception):
    """Root of every error pyspark-dstl raises."""


class DstlWarning(UserWarning):
    """Root of every warning pyspark-dstl gives."""


class ConfigError(DstlError, ValueError):
    """A setting has an invalid value; the message starts with the setting's key."""


class LoopClosedError(DstlError):
    """Work was handed to an event loop thread that is closed (its owner was closed)."""


class LoopUsageError(DstlError):
    """A blocking call was made from the loop's own thread, which would deadlock."""


EXCERPT_CHARS = 160
"""The most characters of untrusted content an error message quotes."""


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """repr() of `value` (str() of an exception, with its type), cut to `limit` characters.

    Decoding errors quote what they met; a crafted file must not turn that into a message as
    large as the file (an unpacker's ExtraData carries everything it read).
    """
    if isinstance(value, BaseException):
        text = f"{type(value).__name__}: {_bounded_str(value, limit)}"
    else:
        text = _bounded_repr(value, limit)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def _bounded_repr(value: object, limit: int, depth: int = 0) -> str:
    """repr() that never builds more than about `limit` characters per element."""
    if isinstance(value, bytes | bytearray | memoryview):
        head = bytes(value[:limit])
        more = len(value) - len(head)
        return repr(head) + (f"... ({more} more bytes)" if more > 0 else "")
    if isinstance(value, str):
        more = len(value) - limit
        return repr(value[:limit]) + (f"... ({more} more characters)" if more > 0 else "")
    if isinstance(value, list | tuple | set | frozenset | dict):
        if depth >= 2 or len(value) > 8:
            return f"<{type(value).__name__} of {len(value)} items>"
        if isinstance(value, dict):
            parts = [f"{_bounded_repr(k, limit, depth + 1)}: {_bounded_repr(v, limit, depth + 1)}"
                     for k, v in value.items()]
        else:
            parts = [_bounded_repr(item, limit, depth + 1) for item in value]
        return f"<{type(value).__name__}: {', '.join(parts)}>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _bounded_str(exc: BaseException, limit: int) -> str:
    if exc.args and not isinstance(exc.args[0], str):  # e.g. ExtraData(unpacked, extra)
        return ", ".join(_bounded_repr(arg, limit) for arg in exc.args[:2])
    return str(exc)
