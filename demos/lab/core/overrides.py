"""The `--set KEY=VALUE` language: a value (YAML) put at a key path of the raw config, an
entry addressed by its id (`scenarios.<id>.lr`) or its number (`scenarios[0].lr`)."""
from __future__ import annotations

import re
from typing import Any

from demos.lab.core.safe_yaml import check_size, yaml_error
from demos.lab.core.schema import ConfigError, did_you_mean, join, show
from demos.lab.core.text import visible


def entry_id(raw: Any) -> Any:
    return raw.get("id", raw.get("scenario")) if isinstance(raw, dict) else None


def apply_set(raw: dict, assignment: str) -> str:
    """Apply one `--set KEY=VALUE` to the raw config; return the key path it sets."""
    import yaml

    shown = visible(assignment)
    key, sep, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {shown}: expected KEY=VALUE, e.g. seed=3 or "
                          f"scenarios.<id>.lr=1e-5")
    try:
        parsed = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
        if parsed is not None:
            check_size(parsed)
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {shown}: {yaml_error(e)}") from None
    except RecursionError:
        raise ConfigError(f"--set {shown}: nested too deeply") from None
    except ConfigError as e:
        raise ConfigError(f"--set {shown}: {e}") from None
    node: Any = raw
    path = ""
    numbered = re.fullmatch(r"scenarios\[(\d+)\]", parts[0])  # the form errors name keys by
    if not numbered and parts[0].startswith("scenarios["):
        raise ConfigError(f"--set {shown}: {parts[0]}: an entry's number is 0, 1, 2, ... "
                          f"(or use scenarios.<id>.<key>=VALUE)")
    if numbered:
        parts = ["scenarios", numbered[1], *parts[1:]]
    if parts[0] == "scenarios":
        entries = raw.get("scenarios")
        if len(parts) < 3 or not isinstance(entries, list):
            raise ConfigError(f"--set {shown}: address a scenario entry by id: "
                              f"scenarios.<id>.<key>=VALUE (or scenarios[<i>].<key>=VALUE)")
        ids = [entry_id(e) for e in entries]
        if numbered:
            if int(parts[1]) >= len(entries):
                raise ConfigError(f"--set {shown}: there are {len(entries)} scenario entries, "
                                  f"numbered 0..{len(entries) - 1}")
            index = int(parts[1])
        elif parts[1] not in ids:
            raise ConfigError(f"--set {shown}: no scenario entry with id '{parts[1]}'"
                              f"{did_you_mean(parts[1], [str(i) for i in ids])}")
        else:
            index = ids.index(parts[1])
        node, path, parts = entries[index], f"scenarios[{index}]", parts[2:]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {shown}: {path} is not a mapping (it is {show(node)})")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {shown}: {join(path, part)} is not a mapping")
        node, path = child, join(path, part)
    node[parts[-1]] = value
    return join(path, parts[-1])
