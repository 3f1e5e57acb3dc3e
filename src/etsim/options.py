"""One option schema: a setting is declared once, with its default, help, parser and range, and parsed everywhere.

Settings are fields of frozen dataclasses made with :func:`option`. The same declaration serves every place a
setting can be written:

- a file or an inline mapping: :func:`parse_options` refuses unknown keys (listing the valid ones), converts each
  value with the option's parser (units are parsed here, once, by :mod:`etsim.units`) and names the file and key
  on any error;
- the command line: :func:`add_arguments` derives ``--name-with-dashes`` flags with their help text, and
  :func:`arguments_given` collects the flags given, which :func:`parse_options` then reads as text;
- documentation: :func:`option_help`.

Parsers are callables ``parse(value, *, key) -> value`` that raise :class:`~etsim.errors.ConfigError` naming
*key*. The ones here (:class:`Integer`, :class:`Size`, :class:`Time`, :class:`Bandwidth`, :class:`Choice`, …) also
read command-line text (``from_text``) and check a finite range: a value that would overflow a simulated time
(``1e300 s``, ``1e400 TFLOP/s``) is an error here, never a NaN in a result. A plain function is a parser too
(plug-ins declare theirs that way); it receives command-line values as strings.

Used by :class:`~etsim.system.config.SystemConfig`, the network models' ``Options``, the workload generators, the
experiment engines, TACOS parameters, experiment files and plot specs, and the command line's own flags
(``etsim tune``'s and ``etsim optimise``'s requests, ``--trace-limit``, ``--top``, ``--max-ranks``, ``--jobs``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from etsim.errors import ConfigError, EtsimError
from etsim.units import parse_bandwidth, parse_size, parse_time

__all__ = [
    "MAX_BANDWIDTH",
    "MAX_FLOPS",
    "MAX_TIME",
    "Bandwidth",
    "Boolean",
    "Choice",
    "Flops",
    "Integer",
    "ListOf",
    "Name",
    "Nested",
    "Number",
    "Optional",
    "Parser",
    "Size",
    "Text",
    "Time",
    "add_arguments",
    "arguments_given",
    "describe_options",
    "flag_name",
    "keys_named",
    "option",
    "option_fields",
    "option_help",
    "parse_arguments",
    "parse_options",
]

T = TypeVar("T")

#: The longest time etsim accepts as a setting (about 31.7 years): sums of such times stay exact enough and finite.
MAX_TIME = 1e18
#: The largest bandwidth etsim accepts as a setting, in bytes per ns (10^21 B/s).
MAX_BANDWIDTH = 1e12
#: The largest operation rate etsim accepts as a setting, in operations per ns (10^24 FLOP/s).
MAX_FLOPS = 1e15


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    parse: Callable[..., Any] | None = None,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    flag: bool | str = True,
    metavar: str | None = None,
) -> Any:
    """Declare an option: a dataclass field with a default, one line of help and a parser.

    Args:
        default: the default value, already in internal units; leave it out for a required option (the
            dataclass must then be ``kw_only``).
        help: one line shown in ``--help``, documentation and messages.
        parse: ``parse(value, key=...)`` converting a configuration value (a unit string, a number) into the
            internal value; raises :class:`~etsim.errors.ConfigError`. None: the value is taken as written.
        default_factory: a callable making the default (for mutable defaults).
        flag: whether :func:`add_arguments` makes a command-line flag of it (a string: the flag's name, when it
            differs from ``--name-with-dashes``).
        metavar: the flag's value name in ``--help``.
    """
    metadata = {"help": help, "parse": parse, "flag": flag, "metavar": metavar, "option": True}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The options of dataclass *cls*, in declaration order (fields made with :func:`option`, or with help)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("option") or "help" in f.metadata]


def option_help(cls: type) -> dict[str, str]:
    """Option name → help text."""
    return {f.name: f.metadata.get("help", "") for f in option_fields(cls)}


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def parse_options(
    cls: type,
    values: Mapping[Any, Any],
    *,
    key: Callable[[str], str] = str,
    unknown: str = "{key}: unknown key {name!r}; valid keys: {valid}",
    missing: str = "{key}: missing",
    text: bool = False,
    sort_valid: bool = True,
) -> dict[str, Any]:
    """Validate *values* against the options of *cls*; return the parsed values of the keys given.

    The dataclass supplies defaults for the keys not given: ``cls(**parse_options(cls, values))``.

    Args:
        cls: a dataclass whose fields were declared with :func:`option`.
        values: option name → value as written (in a file, a mapping, or as flag text).
        key: how messages name an option (``lambda n: f"{where}: {n}"``, ``lambda n: f"--{n}"``).
        unknown: the message for an unknown key; ``{key}`` (the key as *key* names it), ``{name}`` and
            ``{valid}`` (the valid names) are filled in.
        missing: the message for a required option not given (``{key}``, ``{name}``, ``{required}``).
        text: values are command-line text: parsers read them with their ``from_text``.
        sort_valid: list the valid names sorted (else in declaration order).

    Raises:
        ConfigError: an unknown key, a missing required option, or a bad value (named by *key*).
    """
    fields = {f.name: f for f in option_fields(cls)}
    out: dict[str, Any] = {}
    for name, value in values.items():
        f = fields.get(name) if isinstance(name, str) else None
        if f is None:
            valid = ", ".join(sorted(fields) if sort_valid else fields) or "(none)"
            raise ConfigError(unknown.format(key=key(str(name)), name=name, valid=valid))
        parse = f.metadata.get("parse")
        if value is None and f.default is None and not isinstance(parse, Parser):
            out[name] = None  # a plain-function parser never sees null where null is the default
        elif parse is None:
            out[name] = value
        else:
            try:
                if text and isinstance(value, str) and isinstance(parse, Parser):
                    out[name] = parse.from_text(value, key=key(name))
                else:
                    out[name] = parse(value, key=key(name))
            except (ValueError, TypeError, ArithmeticError) as exc:  # a plug-in's parser: one line, not a traceback
                if isinstance(exc, EtsimError):
                    raise
                raise ConfigError(f"{key(name)}: {value!r} refused: {type(exc).__name__}: {exc}") from None
    for name, f in fields.items():
        if name not in out and _required(f):
            required = ", ".join(n for n, g in fields.items() if _required(g))
            raise ConfigError(missing.format(key=key(name), name=name, required=required))
    return out


def plain_help(text: str) -> str:
    """Docstring text for a terminal: Sphinx roles and literals as plain words (:mod:`x` and ``x`` become x)."""
    return re.sub(r"``([^`]+)``", r"\1", re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text))


# --- the command line -------------------------------------------------------------------------------------------


def flag_name(name: str, prefix: str = "") -> str:
    """``grad_size`` → ``--grad-size`` (with *prefix*: ``--ray-address`` for ``address``)."""
    return "--" + (f"{prefix}-" if prefix else "") + name.replace("_", "-")


def add_arguments(
    parser: Any, cls: type, *, prefix: str = "", only: Iterable[str] | None = None, skip: Iterable[str] = ()
) -> list[str]:
    """Add a ``--flag`` to an :mod:`argparse` parser for each option of *cls* that has one; return the flags.

    Flags take text (parsed later by :func:`parse_options` with ``text=True``, so errors name the flag); a
    :class:`Boolean` option becomes a switch: ``--name`` when it defaults to false, ``--no-name`` when it defaults
    to true. Required options are required flags. *only* restricts the flags to those options.
    """
    skipped = set(skip)
    wanted = None if only is None else set(only)
    flags = []
    for f in option_fields(cls):
        if f.name in skipped or not f.metadata.get("flag", True) or (wanted is not None and f.name not in wanted):
            continue
        parse = f.metadata.get("parse")
        text = f.metadata.get("help", "")
        dest = (f"{prefix}_" if prefix else "") + f.name
        named = f.metadata.get("flag")
        flag = named if isinstance(named, str) else flag_name(f.name, prefix)
        if isinstance(parse, Boolean) and isinstance(f.default, bool):
            name = flag if f.default is False else "--no-" + flag[2:]
            action = "store_true" if f.default is False else "store_false"
            shown = text if not f.default else f"turn off (on by default): {text}"
            parser.add_argument(name, dest=dest, action=action, default=None, help=shown)
            flags.append(name)
            continue
        shown = _shown_default(f)
        if shown:
            text = f"{text} (default {shown})" if text else f"default {shown}"
        choices = getattr(parse, "choices", None)
        metavar = f.metadata.get("metavar") or ("{" + ",".join(choices) + "}" if choices else None)
        metavar = metavar or getattr(parse, "metavar", None)
        if isinstance(parse, ListOf):  # repeatable, and comma-separated
            text = f"{text}; repeatable" if text else "repeatable"
            parser.add_argument(
                flag, dest=dest, action="append", required=_required(f), default=None, metavar=metavar, help=text
            )
        else:
            parser.add_argument(flag, dest=dest, required=_required(f), default=None, metavar=metavar, help=text)
        flags.append(flag)
    return flags


def _shown_default(f: dataclasses.Field[Any]) -> str:
    if _required(f) or f.default_factory is not dataclasses.MISSING or f.default in (None, False, (), [], ""):
        return ""
    shown = f.metadata.get("parse")
    described = getattr(shown, "show", None)
    return described(f.default) if described is not None else str(f.default)


def parse_arguments(args: Any, cls: type[T]) -> T:
    """The options of *cls* from the command line (flags of :func:`add_arguments`, defaults for the others)."""
    return cls(**parse_options(cls, arguments_given(args, cls), key=flag_name, text=True))


def arguments_given(args: Any, cls: type, *, prefix: str = "", only: Iterable[str] | None = None) -> dict[str, Any]:
    """The options of *cls* given on the command line (flags of :func:`add_arguments`): text, or a switch's bool."""
    out: dict[str, Any] = {}
    wanted = None if only is None else set(only)
    for f in option_fields(cls):
        if (wanted is not None and f.name not in wanted) or not f.metadata.get("flag", True):
            continue
        value = getattr(args, (f"{prefix}_" if prefix else "") + f.name, None)
        if isinstance(value, list):  # a repeatable flag given several times
            value = ",".join(value)
        if value is not None:
            out[f.name] = value
    return out


# --- parsers ----------------------------------------------------------------------------------------------------


class Parser:
    """Base class of option parsers: ``parser(value, key=…)`` for values as written in files, ``from_text`` for flags.

    Contract for subclasses:

    - :meth:`__call__` returns the internal value or raises :class:`~etsim.errors.ConfigError` naming *key*;
    - :meth:`from_text` reads a command-line string (default: the same as :meth:`__call__`);
    - :meth:`show` formats an internal value for ``--help`` (default: ``str``);
    - null (YAML ``null``, Python None) reaches the parser like any value: :class:`Optional` accepts it.
    """

    #: The value's name in ``--help`` (``N``, ``SIZE``, ``TIME`` …).
    metavar: str | None = None

    def __call__(self, value: Any, *, key: str) -> Any:
        """The internal value of *value*."""
        raise NotImplementedError

    def from_text(self, text: str, *, key: str) -> Any:
        """The internal value of command-line *text*."""
        return self(text, key=key)

    def show(self, value: Any) -> str:
        """*value* as ``--help`` shows a default."""
        return str(value)


def _fail(key: str, expected: str, value: Any) -> ConfigError:
    # Flags read as a sentence ("--npus must be >= 1, got 0"), file keys as "key: reason".
    if key.startswith("--"):
        short = expected.removeprefix("an integer ").removeprefix("a number ")
        return ConfigError(f"{key} must be {short}, got {value}")
    return ConfigError(f"{key}: expected {expected}, got {value!r}")


def _bounds(minimum: float | None, maximum: float | None) -> str:
    parts = []
    if minimum is not None:
        parts.append(f">= {minimum:,}" if isinstance(minimum, int) and minimum >= 10_000 else f">= {minimum}")
    if maximum is not None:
        parts.append(f"<= {maximum:,}" if isinstance(maximum, int) and maximum >= 10_000 else f"<= {maximum}")
    return " and ".join(parts)


class Integer(Parser):
    """An integer (never a bool) in ``[minimum, maximum]``."""

    metavar = "N"

    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def __call__(self, value: Any, *, key: str) -> int:
        """*value* if it is an integer in range."""
        expected = f"an integer {_bounds(self.minimum, self.maximum)}".rstrip()
        if isinstance(value, bool) or not isinstance(value, int):
            if key.startswith("--"):
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
            raise _fail(key, expected, value)
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise _fail(key, expected, value)
        return value

    def from_text(self, text: str, *, key: str) -> int:
        """A decimal integer."""
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise ConfigError(f"{key} must be an integer, got {text!r}")
        return self(int(text), key=key)


class Number(Parser):
    """A finite number (int or float, never a bool) in ``[minimum, maximum]``."""

    metavar = "X"

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def __call__(self, value: Any, *, key: str) -> float:
        """*value* as a float, if it is a finite number in range."""
        expected = f"a number {_bounds(self.minimum, self.maximum)}".rstrip()
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise _fail(key, expected, value)
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise _fail(key, expected, value)
        return float(value)

    def from_text(self, text: str, *, key: str) -> float:
        """A decimal number."""
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(f"{key} must be a number, got {text!r}") from None
        return self(number, key=key)


class Boolean(Parser):
    """``true`` or ``false`` (YAML booleans; on the command line also yes/no, on/off, 1/0)."""

    _TEXT: ClassVar[dict[str, bool]] = dict.fromkeys(("true", "yes", "on", "1"), True) | dict.fromkeys(
        ("false", "no", "off", "0"), False
    )

    def __call__(self, value: Any, *, key: str) -> bool:
        """*value* if it is a bool."""
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value

    def from_text(self, text: str, *, key: str) -> bool:
        """true/false, yes/no, on/off, 1/0."""
        found = self._TEXT.get(text.strip().lower())
        if found is None:
            raise ConfigError(f"{key}: expected true or false, got {text!r}")
        return found


class Text(Parser):
    """A string (non-empty unless ``empty=True``)."""

    def __init__(self, *, empty: bool = True, what: str = "a string") -> None:
        self.empty = empty
        self.what = what

    def __call__(self, value: Any, *, key: str) -> str:
        """*value* if it is a string."""
        if not isinstance(value, str) or (not self.empty and not value):
            raise ConfigError(f"{key}: expected {self.what}, got {value!r}")
        return value


class Choice(Parser):
    """One of a fixed set of strings."""

    def __init__(self, *choices: str) -> None:
        self.choices = tuple(choices)

    def __call__(self, value: Any, *, key: str) -> str:
        """*value* if it is one of the choices."""
        if not isinstance(value, str) or value not in self.choices:
            raise ConfigError(f"{key}: expected one of {', '.join(self.choices)}, got {value!r}")
        return value


class Size(Parser):
    """A size (``1 MiB``) in whole bytes (an int), at most *maximum*; bare numbers are ``bare_unit``."""

    metavar = "SIZE"

    def __init__(self, minimum: int = 0, maximum: int | None = None, *, bare_unit: str | None = "B") -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.bare_unit = bare_unit

    def __call__(self, value: Any, *, key: str) -> int:
        """Bytes."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ConfigError(f"{key}: expected a size such as '1 MiB', got {value!r}")
        size = parse_size(value, key=key, default_unit=self.bare_unit)
        if size < self.minimum:
            raise ConfigError(f"{key}: size {value!r} must be at least {self.minimum} bytes")
        if self.maximum is not None and size > self.maximum:
            raise ConfigError(f"{key}: size {value!r} is larger than etsim's limit of {self.maximum:,} bytes")
        return size

    def show(self, value: Any) -> str:
        """``1 MiB``."""
        from etsim.units import format_size

        return format_size(value)


class Time(Parser):
    """A duration (``500 ns``, ``1.5 us``) in ns, at most :data:`MAX_TIME`; bare numbers are ``bare_unit``."""

    metavar = "TIME"

    def __init__(self, *, bare_unit: str | None = None, maximum: float = MAX_TIME) -> None:
        self.bare_unit = bare_unit
        self.maximum = maximum

    def __call__(self, value: Any, *, key: str) -> float:
        """Nanoseconds."""
        ns = parse_time(value, key=key, default_unit=self.bare_unit)
        if not ns <= self.maximum:
            raise ConfigError(f"{key}: time {value!r} is longer than etsim's limit of {self.maximum:g} ns")
        return ns

    def show(self, value: Any) -> str:
        """``10 ns``."""
        from etsim.units import format_time

        return format_time(value)


class Bandwidth(Parser):
    """A bandwidth (``50 GB/s``, ``400 Gbps``) in bytes per ns, positive and at most :data:`MAX_BANDWIDTH`."""

    metavar = "BW"

    def __init__(self, *, bare_unit: str | None = None) -> None:
        self.bare_unit = bare_unit

    def __call__(self, value: Any, *, key: str) -> float:
        """Bytes per ns."""
        bandwidth = parse_bandwidth(value, key=key, default_unit=self.bare_unit)
        if not bandwidth <= MAX_BANDWIDTH:
            raise ConfigError(f"{key}: bandwidth {value!r} is larger than etsim's limit of {MAX_BANDWIDTH * 1e9:g} B/s")
        return bandwidth

    def show(self, value: Any) -> str:
        """``50 GB/s``."""
        from etsim.units import format_bandwidth

        return format_bandwidth(value)


_FLOPS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


class Flops(Parser):
    """An operation rate (``312 TFLOP/s`` or ``312 TFLOPS``) in operations per ns, positive and finite."""

    metavar = "RATE"

    def __call__(self, value: Any, *, key: str) -> float:
        """Operations per ns."""
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([KMGTP]?)FLOP(?:/s|S)\s*", str(value))
        if not m or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a rate like '312 TFLOP/s', got {value!r}")
        try:
            number = float(m.group(1))
        except ValueError:
            raise ConfigError(f"{key}: bad number in {value!r}") from None
        if number <= 0:
            raise ConfigError(f"{key}: must be positive, got {value!r}")
        rate = number * _FLOPS[m.group(2)] / 1e9
        if not rate >= 1e-9:  # a subnormal rate would make times infinite
            raise ConfigError(f"{key}: {value!r} is below etsim's limit of 1 FLOP/s")
        if not rate <= MAX_FLOPS:
            raise ConfigError(f"{key}: {value!r} is larger than etsim's limit of {MAX_FLOPS * 1e9:g} FLOP/s")
        return rate


class Optional(Parser):
    """``None`` (YAML ``null``) or what *inner* accepts; with *none*, that word means None too (``--fallback none``)."""

    def __init__(self, inner: Parser, *, none: str | None = None) -> None:
        self.inner = inner
        self.none = none
        self.choices = getattr(inner, "choices", None)
        self.metavar = inner.metavar

    def __call__(self, value: Any, *, key: str) -> Any:
        """None, or the inner parser's value."""
        return None if value is None or (self.none is not None and value == self.none) else self.inner(value, key=key)

    def from_text(self, text: str, *, key: str) -> Any:
        """The inner parser's reading (or None for the *none* word)."""
        return None if self.none is not None and text == self.none else self.inner.from_text(text, key=key)

    def show(self, value: Any) -> str:
        """As the inner parser shows it."""
        return self.inner.show(value)


class ListOf(Parser):
    """A non-empty list of what *item* accepts; on the command line, comma-separated."""

    metavar = "A,B,…"

    def __init__(self, item: Parser, *, example: str = "", what: str = "values") -> None:
        self.item = item
        self.example = example
        self.what = what

    def __call__(self, value: Any, *, key: str) -> list[Any]:
        """The list, each item parsed (``key[i]`` in messages)."""
        if isinstance(value, str):
            return self.from_text(value, key=key)
        if not isinstance(value, list) or not value:
            hint = f" such as {self.example}" if self.example else ""
            raise ConfigError(f"{key}: expected a non-empty list{hint}, got {value!r}")
        return [self.item(v, key=f"{key}[{i}]") for i, v in enumerate(value)]

    def from_text(self, text: str, *, key: str) -> list[Any]:
        """Comma-separated items."""
        items = [part.strip() for part in text.split(",")]
        if not text.strip() or not all(items):
            raise ConfigError(f"{key}: expected comma-separated {self.what}, got {text!r}")
        try:
            return [self.item.from_text(v, key=key) for v in items]
        except ConfigError as exc:
            raise ConfigError(f"{key}: expected comma-separated {self.what}, got {text!r} ({exc})") from None

    def show(self, value: Any) -> str:
        """Comma-separated."""
        return ",".join(self.item.show(v) for v in value)


class Name(Parser):
    """A name that is one path component of at most 100 letters, digits, ``.``, ``_``, ``-``; never ``.`` or ``..``."""

    def __call__(self, value: Any, *, key: str) -> str:
        """*value* if it names one file or directory."""
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", value) or value in {".", ".."}:
            raise ConfigError(f"{key}: expected a name of up to 100 letters, digits, '.', '_', '-', got {value!r}")
        return value


class Nested(Parser):
    """A mapping parsed as the options of another dataclass (``resources: {compute_streams: 2}``)."""

    def __init__(self, cls: type, *, unknown: str = "{key}: unknown key {name!r}; valid keys: {valid}") -> None:
        self.cls = cls
        self.unknown = unknown

    def __call__(self, value: Any, *, key: str) -> Any:
        """An instance of the dataclass."""
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping")
        try:  # (a check across keys, the dataclass's own, is named where the mapping is)
            return self.cls(**parse_options(self.cls, value, key=lambda n: f"{key}.{n}", unknown=self.unknown))
        except ConfigError as exc:
            raise exc if str(exc).startswith(key) else ConfigError(f"{key}: {exc}") from None


def keys_named(where: str = "", prefix: str = "") -> Callable[[str], str]:
    """A *key* function for :func:`parse_options`: ``WHERE: PREFIXname`` (or ``PREFIXname`` with no *where*)."""
    return (lambda name: f"{where}: {prefix}{name}") if where else (lambda name: f"{prefix}{name}")


def describe_options(cls: type, *, skip: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """``(name, default as shown, help)`` of each option, for documentation tables."""
    shown = [(f, "required" if _required(f) else _shown_default(f) or str(f.default)) for f in option_fields(cls)]
    return [(f.name, default, f.metadata["help"]) for f, default in shown if f.name not in skip]
