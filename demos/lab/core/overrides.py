"""The `--set KEY=VALUE` language: a value (YAML) put at a key path of the raw config, an
entry addressed by its id (`scenarios.<id>.lr`) or its number (`scenarios[0].lr`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from demos.lab.core.safe_yaml import parse_text
from demos.lab.core.schema import ConfigError, did_you_mean, join, show
from demos.lab.core.text import visible


def entry_id(raw: Any) -> Any:
    return raw.get("id", raw.get("scenario")) if isinstance(raw, dict) else None


@dataclass(frozen=True)
class Setting:
    """A `--set` given as a key path and a value, not as text to parse (the Python API's keys
    and `set=`; --device, --seed and --threads): the value goes into the config as it is. Its
    text, `KEY=VALUE` with the value as YAML, is for the records (summary.json's sets); `said`,
    how it was given, for messages. Make one with `setting`."""
    key: str
    value: Any
    said: str | None = None  # e.g. "--seed 3"; None: "--set KEY=VALUE"

    def __str__(self) -> str:
        return f"{self.key}={yaml_text(self.value)}"


def given(assignment: str | Setting) -> str:
    """How an override was given, for messages: `--set KEY=VALUE`, or its option."""
    said = assignment.said if isinstance(assignment, Setting) else None
    return visible(said or f"--set {assignment}")


def setting(key: str, value: Any) -> Setting:
    """`key` set to `value`: numbers, text, booleans, None, and lists and mappings of them
    (a tuple is a list; a NumPy value or a tensor its .tolist()); anything else, a ConfigError
    naming the key."""
    return Setting(key, plain(value, f"--set {key}"))


def plain(value: Any, where: str) -> Any:
    """`value` as a config's data, the kinds YAML gives (see `setting`)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes, list, dict)):
        value = value.tolist()  # a NumPy scalar or array, a tensor: plain numbers and lists
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v, f"{where}.{k}") for k, v in value.items()}
    raise ConfigError(f"{where}: a value of type {type(value).__name__} is not config data; "
                      f"give a number, text, a list or a mapping")


def yaml_text(value: Any) -> str:
    """A config value as YAML on one line (1e-05 as 1.0e-05, lists in flow style)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def apply_set(raw: dict, assignment: str | Setting) -> str:
    """Apply one `--set KEY=VALUE` (or a Setting) to the raw config; return the key path it
    sets."""
    shown = given(assignment)
    if isinstance(assignment, Setting):
        key, sep, value = assignment.key, "=", assignment.value
    else:
        key, sep, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"{shown}: expected KEY=VALUE, e.g. seed=3 or "
                          f"scenarios.<id>.lr=1e-5")
    if not isinstance(assignment, Setting):
        value = parse_text(text, f"{shown}")
    node: Any = raw
    path = ""
    numbered = re.fullmatch(r"scenarios\[(\d+)\]", parts[0])  # the form errors name keys by
    if not numbered and parts[0].startswith("scenarios["):
        raise ConfigError(f"{shown}: {parts[0]}: an entry's number is 0, 1, 2, ... "
                          f"(or use scenarios.<id>.<key>=VALUE)")
    if numbered:
        parts = ["scenarios", numbered[1], *parts[1:]]
    if parts[0] == "scenarios":
        entries = raw.get("scenarios")
        if len(parts) < 3 or not isinstance(entries, list):
            raise ConfigError(f"{shown}: address a scenario entry by id: "
                              f"scenarios.<id>.<key>=VALUE (or scenarios[<i>].<key>=VALUE)")
        ids = [entry_id(e) for e in entries]
        if numbered:
            if int(parts[1]) >= len(entries):
                raise ConfigError(f"{shown}: there are {len(entries)} scenario entries, "
                                  f"numbered 0..{len(entries) - 1}")
            index = int(parts[1])
        elif parts[1] not in ids:
            raise ConfigError(f"{shown}: no scenario entry with id '{parts[1]}'"
                              f"{did_you_mean(parts[1], [str(i) for i in ids])}")
        else:
            index = ids.index(parts[1])
        node, path, parts = entries[index], f"scenarios[{index}]", parts[2:]
        if not isinstance(node, dict):
            raise ConfigError(f"{shown}: {path} is not a mapping (it is {show(node)})")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{shown}: {join(path, part)} is not a mapping")
        node, path = child, join(path, part)
    node[parts[-1]] = value
    return join(path, parts[-1])
