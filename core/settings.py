"""Settings declared once: each dataclass field carries its key, kind, default, bounds and doc.

    @dataclass(frozen=True)
    class PoolSettings(Settings):
        SECTION = Section("spark.dstl.pool.", "pool")
        size: int = setting("size", INT, 4, "Connections per process.", at_least=1)
        wait: float = setting("wait", DURATION, 0.5, "Longest wait for a connection.",
                              at_least=0)

From that one statement per setting, `read_settings` parses Spark conf-style values (strings or
Python values) and environment variables into the frozen class, `Settings.__post_init__` holds a
value built in code to the same bounds, `setting_keys` lists the keys, and `markdown_table`
documents them. Every error starts with the full key. Rules between fields that a
declaration cannot say (one bound above another) go in the class's `check_together`.

Environment variables are named after the full key: upper-cased, every '.' an '_', so
`spark.dstl.changelog.persistDelay` is `SPARK_DSTL_CHANGELOG_PERSISTDELAY`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar, cast

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.units import parse_duration, parse_size

Parser = Callable[[Any, str], Any]
OFF_WORDS = ("", "none", "off", "false", "disabled")
SETTING = "pyspark_dstl.setting"
SUBSECTION = "pyspark_dstl.subsection"

# --- value parsers: raw setting (string or Python value) -> Python value; errors name the key ---


def parse_bool(raw: Any, key: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {raw!r}")


def parse_int(raw: Any, key: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{key}: expected an integer, got {raw!r}")
    try:
        return int(str(raw).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: expected an integer, got {raw!r}") from exc


def parse_float(raw: Any, key: str) -> float:
    try:
        return float(str(raw).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: expected a number, got {raw!r}") from exc


def parse_text(raw: Any, key: str) -> str:
    text = str(raw).strip()
    if not text:
        raise ConfigError(f"{key}: must not be blank")
    return text


def parse_word(raw: Any, key: str) -> str:
    """A keyword such as a codec or mode name: trimmed and lower-cased."""
    return parse_text(raw, key).lower()


def parse_optional_text(raw: Any, key: str) -> str | None:
    text = "" if raw is None else str(raw).strip()
    return text or None


def is_off(raw: Any) -> bool:
    return raw is None or str(raw).strip().lower() in OFF_WORDS


def parse_optional_int(raw: Any, key: str) -> int | None:
    return None if is_off(raw) else parse_int(raw, key)


def parse_optional_duration(raw: Any, key: str) -> float | None:
    return None if is_off(raw) else parse_duration(raw, key)


# --- how values are shown in the documentation -------------------------------------------------

_SIZE_STEPS = (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024))


def show_duration(seconds: float) -> str:
    """10ms, 30s, 10min, 1h: the shortest exact Spark-style spelling."""
    if 0 < seconds < 1:
        millis = seconds * 1000
        return f"{round(millis)}ms" if math.isclose(millis, round(millis)) else f"{seconds}s"
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds}s"


def show_size(size: int) -> str:
    for unit, step in _SIZE_STEPS:
        if size >= step and size % step == 0:
            return f"{size // step}{unit}"
    return f"{size} bytes"


def show_plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- kinds --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """How one kind of setting is read, which Python values it takes, and how it is shown."""

    name: str
    parse: Parser
    accepts: tuple[type, ...]
    show: Callable[[Any], str] = show_plain
    optional: bool = False
    """An off word (or blank, for text) reads as None, which switches the option off."""


BOOL = Kind("boolean", parse_bool, (bool,))
INT = Kind("integer", parse_int, (int,))
FLOAT = Kind("number", parse_float, (int, float))
TEXT = Kind("text", parse_text, (str,))
WORD = Kind("word (any case)", parse_word, (str,))
DURATION = Kind("duration", parse_duration, (int, float), show_duration)
SIZE = Kind("size", parse_size, (int,), show_size)
OPTIONAL_INT = Kind("integer or `off`", parse_optional_int, (int,), optional=True)
OPTIONAL_DURATION = Kind("duration or `off`", parse_optional_duration, (int, float),
                         show_duration, optional=True)
OPTIONAL_TEXT = Kind("text (blank: unset)", parse_optional_text, (str,), optional=True)


@dataclass(frozen=True)
class Rule:
    """A check a bound cannot express, e.g. "is an http URL"; `phrase` completes "must ..."."""

    phrase: str
    holds: Callable[[Any], bool]


# --- one declaration per option -----------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One option: its key below the section prefix, kind, bounds and one-line doc."""

    key: str
    kind: Kind
    doc: str
    nullable: bool = False
    """None is a valid value (an optional kind, or a None default)."""
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    choices: tuple[str, ...] = ()
    rule: Rule | None = None
    hint: str = ""
    """Added to a bound's error, e.g. how to switch the feature off instead."""
    shown_default: str | None = None
    """The default in the documentation, when the value alone does not say it."""
    unit: str = ""
    """Shown after the default, for counts whose unit the kind does not give (e.g. "%")."""

    def read(self, raw: Any, key: str) -> Any:
        """The value of a raw setting under full key `key`, parsed and checked."""
        value = self.kind.parse(raw, key)
        self.check(value, key)
        return value

    def check(self, value: Any, key: str) -> None:
        problem = self.problem(value)
        if problem is not None:
            raise ConfigError(f"{key}: {problem}, got {value!r}")

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("must ..."), or None."""
        if value is None:
            return None if self.nullable else "must be set"
        if not isinstance(value, self.kind.accepts) or (
                isinstance(value, bool) and bool not in self.kind.accepts):
            article = "an" if self.kind.name[0] in "aeiou" else "a"
            return f"expected {article} {self.kind.name}"
        if isinstance(value, str) and not value.strip():
            return "must not be blank"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        hint = f" ({self.hint})" if self.hint else ""
        limit = self._limit_phrase()
        if limit is not None and not self._within(value):
            return f"must {limit}{hint}"
        if self.rule is not None and not self.rule.holds(value):
            return f"must {self.rule.phrase}{hint}"
        return None

    def _within(self, value: Any) -> bool:
        return ((self.at_least is None or value >= self.at_least)
                and (self.above is None or value > self.above)
                and (self.at_most is None or value <= self.at_most)
                and (self.below is None or value < self.below))

    def _limit_phrase(self) -> str | None:
        low, high = _number(self.at_least, self.above), _number(self.at_most, self.below)
        if low is not None and high is not None:
            if self.above is None and self.below is None:
                return f"be between {low} and {high}"
            if self.above is not None and self.below is not None:
                return f"be between {low} and {high} (exclusive)"
            return (f"be {'above' if self.above is not None else 'at least'} {low} and "
                    f"{'below' if self.below is not None else 'at most'} {high}")
        if self.above == 0:
            return "be positive"
        if self.at_least == 0:
            return "not be negative"
        if low is not None:
            return f"be {'above' if self.above is not None else 'at least'} {low}"
        if high is not None:
            return f"be {'below' if self.below is not None else 'at most'} {high}"
        return None

    def allowed(self) -> str:
        """The bounds in words, for the documentation ("" when anything of the kind goes)."""
        if self.choices:
            return ", ".join(f"`{choice}`" for choice in self.choices)
        phrases = (self._limit_phrase(), self.rule.phrase if self.rule else None)
        parts = [phrase.replace("not be ", "not ").removeprefix("be ")
                 for phrase in phrases if phrase]
        return "; ".join(parts)

    def shown(self, default: Any) -> str:
        """The default as the documentation shows it, with its unit."""
        if self.shown_default is not None:
            return self.shown_default
        if default is None:
            return "unset"
        text = f"`{self.kind.show(default)}`"
        return f"{text} {self.unit}" if self.unit else text


def _number(inclusive: float | None, exclusive: float | None) -> str | None:
    value = inclusive if inclusive is not None else exclusive
    if value is None:
        return None
    return str(int(value)) if float(value).is_integer() else str(value)


def setting(key: str, kind: Kind, default: Any = MISSING, doc: str = "", *,
            factory: Callable[[], Any] | None = None, at_least: float | None = None,
            above: float | None = None, at_most: float | None = None,
            below: float | None = None, choices: Iterable[str] = (), rule: Rule | None = None,
            hint: str = "", shown_default: str | None = None, unit: str = "") -> Any:
    """A dataclass field that is also the option's declaration (kept in the field's metadata).

    `factory` makes the default per instance (like `default_factory`); such a default needs
    `shown_default` for the documentation. A None default makes None a valid value.
    """
    if (default is MISSING) == (factory is None):
        raise TypeError(f"setting {key!r}: give exactly one of default and factory")
    if factory is not None and shown_default is None:
        raise TypeError(f"setting {key!r}: a factory default needs shown_default")
    if not doc:
        raise TypeError(f"setting {key!r}: needs a one-line doc")
    declared = Setting(key, kind, doc, nullable=kind.optional or default is None,
                       at_least=at_least, above=above, at_most=at_most, below=below,
                       choices=tuple(choices), rule=rule, hint=hint,
                       shown_default=shown_default, unit=unit)
    metadata = {SETTING: declared}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def subsection(settings_class: type[Settings], key: str) -> Any:
    """A field holding another settings class, whose keys sit under `key` (e.g. "changelog.")."""
    return field(default_factory=settings_class, metadata={SUBSECTION: key})


@dataclass(frozen=True)
class Section:
    """Where a class's keys live by default, and what its settings are called in errors."""

    prefix: str
    what: str


# --- the settings classes' common behaviour ------------------------------------------------------

SettingsT = TypeVar("SettingsT", bound="Settings")
_ACTIVE_PREFIX: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pyspark_dstl_settings_prefix", default=None)


class Settings:
    """Base of a frozen settings dataclass whose fields are declared with `setting`."""

    SECTION: ClassVar[Section]

    def __post_init__(self) -> None:
        for name, declared in declared_settings(type(self)).items():
            declared.check(getattr(self, name), self.key_of(name))
        self.check_together()

    def check_together(self) -> None:
        """Rules between fields; raise ConfigError starting with `self.key_of(name)`."""

    def key_of(self, name: str) -> str:
        """The full key of field `name` (under the prefix being read, else the default)."""
        prefix = _ACTIVE_PREFIX.get() or type(self).SECTION.prefix
        return prefix + declared_settings(type(self))[name].key

    def with_changes(self: SettingsT, **changes: Any) -> SettingsT:
        return cast(SettingsT, replace(cast(Any, self), **changes))

    @classmethod
    def from_mapping(cls: type[SettingsT], values: Mapping[str, Any], prefix: str | None = None,
                  base: SettingsT | None = None, *, other_sections: Iterable[str] = (),
                  env: Mapping[str, str] | None = None) -> SettingsT:
        """Settings from Spark conf-style mappings; see `read_settings`."""
        return read_settings(cls, values, prefix, base=base, other_sections=other_sections,
                            env=env)


_DECLARED: dict[type, dict[str, Setting]] = {}


def declared_settings(cls: type[Settings]) -> dict[str, Setting]:
    """Field name -> declaration, in field order (looked up once per class: every
    construction checks them)."""
    found = _DECLARED.get(cls)
    if found is None:
        found = {f.name: f.metadata[SETTING] for f in fields(cast(Any, cls))
                 if SETTING in f.metadata}
        _DECLARED[cls] = found
    return found


def subsections(cls: type[Settings]) -> dict[str, tuple[str, type[Settings]]]:
    """Field name -> (key below the prefix, settings class) of the nested sections."""
    found: dict[str, tuple[str, type[Settings]]] = {}
    for f in fields(cast(Any, cls)):
        if SUBSECTION in f.metadata:
            assert f.default_factory is not dataclasses.MISSING
            found[f.name] = (f.metadata[SUBSECTION], cast(type[Settings], f.default_factory))
    return found


def walk_settings(cls: type[Settings], prefix: str | None = None,
                  path: str = "") -> Iterator[tuple[str, str, Setting]]:
    """(full key, attribute path, declaration) of every setting, nested sections included."""
    prefix = cls.SECTION.prefix if prefix is None else prefix
    for name, declared in declared_settings(cls).items():
        yield prefix + declared.key, path + name, declared
    for name, (key, nested) in subsections(cls).items():
        yield from walk_settings(nested, prefix + key, f"{path}{name}.")


def setting_keys(cls: type[Settings]) -> dict[str, str]:
    """Attribute path -> key below the class's prefix, for every key `read_settings` reads."""
    prefix = cls.SECTION.prefix
    return {path: key[len(prefix):] for key, path, _ in walk_settings(cls)}


def field_default(cls: type[Settings], name: str) -> Any:
    """The default of field `name` (made by its factory when it has one)."""
    for f in fields(cast(Any, cls)):
        if f.name == name:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return f.default
    raise KeyError(name)


# --- reading ------------------------------------------------------------------------------------


def env_name(key: str) -> str:
    """The environment variable of key `key`: upper-cased, '.' as '_'."""
    return key.upper().replace(".", "_")


def env_settings(cls: type[Settings], environ: Mapping[str, str], prefix: str | None = None,
                 other_sections: Iterable[str] = ()) -> dict[str, str]:
    """Conf-style settings from environment variables named after the keys (see `env_name`).

    A variable under the section's name that names no key fails, as an unknown key does;
    variables of `other_sections` are left to their owners.
    """
    prefix = cls.SECTION.prefix if prefix is None else prefix
    by_name = {env_name(key): key for key, _, _ in walk_settings(cls, prefix)}
    section = env_name(prefix)
    skipped = tuple(env_name(prefix + other) for other in other_sections)
    found: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(section) or (skipped and name.startswith(skipped)):
            continue
        if name not in by_name:
            raise ConfigError(f"{name}: unknown {cls.SECTION.what} environment variable; "
                              f"the variable of a key is the key upper-cased with '_' for '.' "
                              f"(known: {', '.join(sorted(by_name))})")
        found[by_name[name]] = value
    return found


def read_settings(cls: type[SettingsT], values: Mapping[str, Any], prefix: str | None = None, *,
                 base: SettingsT | None = None, other_sections: Iterable[str] = (),
                 env: Mapping[str, str] | None = None) -> SettingsT:
    """Settings of `cls` from the keys under `prefix` (the class's own by default).

    Values may be strings (Spark conf) or Python values. `base` supplies the values of keys
    not given (default: the class defaults). Every key under the prefix must be known, except
    those under one of `other_sections` (sub-prefixes another component reads, e.g. "query.").
    With `env`, environment variables are read too; a key given in `values` wins over its variable.
    """
    prefix = cls.SECTION.prefix if prefix is None else prefix
    other_sections = tuple(other_sections)
    if env is not None:
        values = {**env_settings(cls, env, prefix, other_sections), **values}
    own = declared_settings(cls)
    nested = subsections(cls)
    by_key = {declared.key: name for name, declared in own.items()}
    elsewhere = tuple(prefix + key for key, _ in nested.values()) + tuple(
        prefix + other for other in other_sections)
    changes: dict[str, Any] = {}
    for full_key, raw in values.items():
        if not full_key.startswith(prefix) or (elsewhere and full_key.startswith(elsewhere)):
            continue
        name = by_key.get(full_key[len(prefix):])
        if name is None:
            known = ", ".join(sorted(prefix + key for key in by_key))
            rest = f"; and {', '.join(s + '*' for s in elsewhere)}" if elsewhere else ""
            raise ConfigError(f"{full_key}: unknown {cls.SECTION.what} setting "
                              f"(known: {known}{rest})")
        changes[name] = own[name].read(raw, full_key)
    for name, (key, nested_class) in nested.items():
        changes[name] = read_settings(nested_class, values, prefix + key,
                                     base=None if base is None else getattr(base, name))
    token = _ACTIVE_PREFIX.set(prefix)
    try:
        if base is not None:
            return cast(SettingsT, replace(cast(Any, base), **changes))
        return cls(**changes)
    finally:
        _ACTIVE_PREFIX.reset(token)


# --- documentation ------------------------------------------------------------------------------


def markdown_table(cls: type[Settings], prefix: str | None = None) -> str:
    """The class's own settings (not its nested sections) as a Markdown table."""
    prefix = cls.SECTION.prefix if prefix is None else prefix
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for name, declared in declared_settings(cls).items():
        cells = (f"`{prefix}{declared.key}` (`{name}`)", declared.kind.name,
                 declared.shown(field_default(cls, name)), declared.allowed(), declared.doc)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


__all__ = [
    "BOOL",
    "DURATION",
    "FLOAT",
    "INT",
    "OPTIONAL_DURATION",
    "OPTIONAL_INT",
    "OPTIONAL_TEXT",
    "SIZE",
    "TEXT",
    "WORD",
    "Kind",
    "Parser",
    "Rule",
    "Section",
    "Setting",
    "Settings",
    "declared_settings",
    "env_name",
    "env_settings",
    "field_default",
    "is_off",
    "markdown_table",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_optional_duration",
    "parse_optional_int",
    "parse_optional_text",
    "parse_size",
    "parse_text",
    "parse_word",
    "read_settings",
    "setting",
    "setting_keys",
    "subsection",
    "subsections",
    "walk_settings",
]
