"""Typed, strict config schemas: dataclasses whose fields carry help text and bounds.

`build(cls, raw, where)` turns a parsed YAML mapping into a dataclass instance or raises
`ConfigError` naming the exact key. Nothing here imports torch: `--help`, `--list` and config
errors must answer fast.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import reprlib
import types
import typing
from typing import Any, Callable, Literal, Union

MAX_INT = 10**12  # a bound on every integer: steps, sizes, seeds (huge numbers are errors)


class ConfigError(Exception):
    """A user's config or command line is wrong; the message is one line naming the key."""


# a field's type for text that may be empty (a `str` field must not be): a check's detail, a
# word of a command line
Text = typing.Annotated[str, "may be empty"]


REQUIRED = "(required)"  # what describe() gives as the default of a field a config must set


def param(default: Any, help: str, *, path: str | None = None, required: bool = False,
          dry_run: Callable[[Any], Any] | None = None, **bounds: float) -> Any:
    """A config field with its default, a help text and optional bounds (gt, ge, lt, le).
    `path`: a file or folder ("file", "dir") or code ("code": module:Attr, file.py:Attr) named
    relative to the config file, made absolute by the loader. `dry_run`: the field's value ->
    its --dry-run value (Scenario.shrink). `required`: for the docs (the loader checks it)."""
    meta: dict[str, Any] = {"help": help, **bounds, **({"path": path} if path else {}),
                            **({"dry_run": dry_run} if dry_run else {}),
                            **({"required": True} if required else {})}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, else the list of choices."""
    choices = sorted(choices)
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (expected one of: {', '.join(choices)})" if 0 < len(choices) <= 12 else ""


def join(where: str, key: Any) -> str:
    """The dotted path of `key` inside `where` ('' is the top level); odd keys quoted."""
    text = str(key)
    if not (isinstance(key, str) and key.isprintable() and key and len(key) <= 60):
        text = show(key)
    return f"{where}.{text}" if where else text


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 40, 40


def show(value: Any) -> str:
    """A value as the user would recognise it in an error message (bounded, even for huge ones)."""
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# PyYAML (YAML 1.1) reads `5e-6` (an exponent without a dot) as a string; we read it as the
# number it plainly is. Any other string is not a number.
_EXP_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+$")


def _number(value: Any, where: str) -> float:
    if isinstance(value, str) and _EXP_NUMBER.match(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: must be a number, got {show(value)}")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise ConfigError(f"{where}: must be a finite number of reasonable size, got {value}")
    value = float(value)
    if not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value}")
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {show(value)}")
    if abs(value) > MAX_INT:
        raise ConfigError(f"{where}: must be at most {MAX_INT:.0e} in size, got {value}")
    return value


def _check_bounds(value: float, meta: typing.Mapping[str, Any], where: str) -> None:
    for key, op, ok in (("gt", ">", lambda v, b: v > b), ("ge", ">=", lambda v, b: v >= b),
                        ("lt", "<", lambda v, b: v < b), ("le", "<=", lambda v, b: v <= b)):
        if key in meta and not ok(value, meta[key]):
            raise ConfigError(f"{where}: must be {op} {meta[key]}, got {value}")


def convert(tp: Any, value: Any, where: str) -> Any:
    """Check `value` against the type `tp` and return it converted (e.g. int -> float)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return convert(rest[0], value, where)
        for option in rest:  # e.g. int | Literal["auto"]: the first that fits
            try:
                return convert(option, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: must be {' or '.join(_type_name(a) for a in rest)}, "
                          f"got {show(value)}")
    if tp is Any:
        return value
    if hasattr(tp, "from_config"):  # a type that reads itself (user_code.Code)
        return tp.from_config(value, where)
    if origin is Literal:
        if value not in args or isinstance(value, bool):
            raise ConfigError(f"{where}: must be one of {', '.join(map(str, args))}, got "
                              f"{show(value)}{did_you_mean(str(value), map(str, args))}")
        return value
    if tp is int:
        return _integer(value, where)
    if tp is float:
        return _number(value, where)
    if tp in (bool, Text, str):  # taken as they are, if they are what the message says
        kind, ok = {bool: ("true or false", isinstance(value, bool)),
                    Text: ("text", isinstance(value, str)),
                    str: ("a non-empty string", isinstance(value, str) and value != "")}[tp]
        if not ok:
            raise ConfigError(f"{where}: must be {kind}, got {show(value)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: must be a list, got {show(value)}")
        items = [convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        for i, v in enumerate(items):  # a list of choices names each once
            if typing.get_origin(args[0]) is Literal and v in items[:i]:
                raise ConfigError(f"{where}[{i}]: {v} is given twice (also at "
                                  f"[{items.index(v)}]); give it once")
        return items
    if (origin is dict or typing.is_typeddict(tp)) and not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping, got {show(value)}")
    if origin is dict:
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{where}: keys must be names, got {show(k)}")
            out[k] = convert(args[1], v, join(where, k))
        return out
    if typing.is_typeddict(tp):  # a mapping of known keys, each of its own type
        hints = typing.get_type_hints(tp, include_extras=True)
        for key in [*value, *sorted(tp.__required_keys__ - value.keys())]:
            if key not in hints or key not in value:
                raise ConfigError(f"{join(where, key)}: " + ("missing (required)" if key in hints
                                  else f"unknown key{did_you_mean(str(key), hints)}"))
        return {k: convert(hints[k], v, join(where, k)) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    raise TypeError(f"unsupported config type {tp!r} at {where}")  # a bug in a schema


def build(cls: type, raw: Any, where: str) -> Any:
    """Build the dataclass `cls` from the mapping `raw`; unknown keys and bad values are errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'top level'}: must be a mapping of keys to values, "
                          f"got {show(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in raw:
        if key not in fields:
            raise ConfigError(f"{join(where, key)}: unknown key{did_you_mean(str(key), fields)}")
    hints = typing.get_type_hints(cls, include_extras=True)  # Text: str that may be empty
    values = {}
    for name, f in fields.items():
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{join(where, name)}: missing (required)")
            continue
        key_where = join(where, name)
        value = convert(hints[name], raw[name], key_where)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_bounds(value, f.metadata, key_where)
        values[name] = value
    obj = cls(**values)
    if hasattr(obj, "validate"):
        obj.validate(where)
    return obj


def to_dict(obj: Any) -> Any:
    """A dataclass instance as plain YAML-friendly data (only init fields, in order; a value
    that says how it is written, by its to_config())."""
    if hasattr(obj, "to_config"):
        return obj.to_config()
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def describe(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) for each documented field of `cls`, for --list and the README."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init or "help" not in f.metadata:
            continue
        default = (REQUIRED if f.metadata.get("required") else
                   f.default if f.default is not dataclasses.MISSING
                   else f.default_factory())  # type: ignore[operator]  # one of the two is set
        rows.append((f.name, _type_name(hints[f.name]), default, f.metadata["help"]))
    return rows


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " | ".join(map(str, args))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + (
            " | null" if type(None) in args else "")
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    return str(getattr(tp, "shown_as", None) or getattr(tp, "__name__", tp))


def render(obj: Any, notes: dict[str, str], where: str = "", pad: str = "") -> typing.Iterator[str]:
    """The dataclass `obj` as YAML lines `key: value  # its field's help; notes[dotted key]`: a
    dataclass below its key, a list of mappings or dataclasses an item a line, the rest JSON."""
    import json
    def flow(v: Any) -> str:
        if dataclasses.is_dataclass(v):  # as a mapping of its fields not at their defaults
            v = {f.name: vars(v)[f.name] for f in dataclasses.fields(v) if vars(v)[f.name] != (
                f.default if f.default_factory is dataclasses.MISSING else f.default_factory())}
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {json.dumps(x)}" for k, x in v.items()) + "}"
        return json.dumps(int(v) if isinstance(v, float) and v.is_integer() else v)

    for f in dataclasses.fields(obj):
        key, v = join(where, f.name), getattr(obj, f.name)
        rows = isinstance(v, list) and not all(isinstance(x, (int, float, str)) for x in v)
        value = "" if rows or dataclasses.is_dataclass(v) else " " + flow(v)
        comment = "; ".join(filter(None, (f.metadata.get("help"), notes.get(key))))
        yield f"{pad}{f.name}:{value}".ljust(17) + f"  # {comment}" * bool(comment)
        yield from render(v, notes, key, pad + "  ") if dataclasses.is_dataclass(v) else (
            f"{pad}  - {flow(x)}" for x in (v if rows else []))
