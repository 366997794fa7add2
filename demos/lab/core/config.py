"""The run config: YAML file -> `--set` overrides -> strictly validated, typed `RunConfig`.

Generic: the scenarios come in as a registry {name: Scenario}. Loading validates and nothing
else: it imports no torch and no user code. Every problem is a `ConfigError` with one line
naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Literal, Sequence

from demos.lab.core.files import NAME_RE, reserved
from demos.lab.core.overrides import Setting, apply_set, given
from demos.lab.core.safe_yaml import read_yaml
from demos.lab.core.scenario import Expect, Registry, ScenarioConfig, Target  # noqa: F401 (re-exported)
from demos.lab.core.schema import (
    ConfigError,
    build,
    convert,
    did_you_mean,
    join,
    param,
    show,
    to_dict,
)
from demos.lab.core.text import visible
from demos.lab.core.tolerance import check_keys as check_tolerance_keys
from demos.lab.core.user_code import is_path, split_spec

# whole strings only: fullmatch; an index as torch.device spells it (ASCII digits, no leading 0)
DEVICE_RE = re.compile(r"auto|cpu(:0)?|mps|cuda(:(0|[1-9][0-9]{0,2}))?")


@dataclass
class RunConfig:
    """A whole run: where, how seeded, and the scenario entries in order."""
    device: str = param("auto", "auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps")
    seed: int = param(0, "seed of torch's generators, set before each scenario (so --only gives "
                         "the same numbers)", ge=0, le=2**63 - 1)
    threads: int | Literal["auto"] = param(
        "auto", "CPU threads for torch: auto (1 on a machine with up to 2 cores, else half the "
                "cores, at most 8) or a number; trained values depend on it (demos/docs/"
                "reproducible.md)", ge=1, le=1024)
    deterministic: bool = param(False, "torch.use_deterministic_algorithms(True) for the run "
                                       "(and cuDNN benchmark off): bit-identical GPU runs, "
                                       "sometimes slower. CPU runs are reproducible without it")
    stepper_gifs: bool = param(False, "also save each traced backward as an animated GIF, "
                                      "<graph>_steps.gif: a frame per step, for slides")
    scenarios: list[Any] = param([], "the scenario entries, run in this order", required=True)
    # the (entry id, key) pairs the overrides set, which --dry-run keeps (see load_data, shrink)
    explicit: set[tuple[str, str]] = field(default_factory=set, init=False, repr=False)

    def validate(self, where: str) -> None:
        if not DEVICE_RE.fullmatch(self.device):
            raise ConfigError(f"{join(where, 'device')}: must be auto, cpu, cuda, cuda:N or mps, "
                              f"got {show(self.device)}")


def load(path: str, registry: Registry, sets: Sequence[str | Setting] = ()) -> RunConfig:
    """Read, override and validate a run config; raise ConfigError('<file>: <key>: ...')."""
    return load_data(read_yaml(path), path, registry, sets)


def load_data(raw: Any, path: str, registry: Registry,
              sets: Sequence[str | Setting] = ()) -> RunConfig:
    """Override and validate parsed config data read from `path` (nothing is imported or run).
    Relative paths are made absolute (`resolve_path`): the dumped config runs from anywhere."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level: must be a mapping with a 'scenarios' list, "
                          f"got {show(raw)}")
    set_paths: dict[str, str | Setting] = {}
    for assignment in sets:
        key_path = apply_set(raw, assignment)
        if key_path in set_paths:  # two spellings (scenarios.<id>.k, scenarios[i].k), or twice
            raise ConfigError(f"{given(assignment)}: the same key as "
                              f"{given(set_paths[key_path])} ({key_path}); give it once")
        set_paths[key_path] = assignment
    config_dir = os.path.dirname(os.path.abspath(path))

    def base(key_path: str) -> str:
        """Where a relative path starts: the config file's folder, or the current one for --set."""
        return os.getcwd() if key_path in set_paths else config_dir

    try:
        run = build_run(raw, registry, base)
    except ConfigError as e:
        msg = str(e)
        for key_path, assignment in set_paths.items():
            if msg.startswith(key_path + ":") or msg.startswith(key_path + "."):
                msg += f" (from {given(assignment)})"
                if msg.startswith(key_path + ": unknown key"):
                    msg += entry_hint(raw, registry, key_path, str(assignment))
        raise ConfigError(f"{path}: {msg}") from None
    numbered = (re.match(r"scenarios\[(\d+)\]\.([^.]+)", key_path) for key_path in set_paths)
    run.explicit = {(run.scenarios[int(m[1])].id, m[2]) for m in numbered if m}
    return run


def entry_hint(raw: dict, registry: Registry, key: str, assignment: str) -> str:
    """For a --set of a top-level key that is a scenario entry's: the spelling that sets it
    (`--set scenarios.legendre_fit.lr=...`), naming the entries that have the key."""
    def has_key(entry: Any) -> bool:
        name = str(entry.get("scenario")) if isinstance(entry, dict) else ""
        fields = dataclasses.fields(registry[name].config) if name in registry else ()
        return key in [f.name for f in fields]

    entries = raw.get("scenarios")
    ids = [str(e.get("id", e["scenario"])) for e in entries if has_key(e)] \
        if isinstance(entries, list) else []
    if not ids:
        return ""
    value = assignment.partition("=")[2]
    return (f"; {key} is a key of the scenario entries: --set scenarios.{ids[0]}.{key}={value}"
            + (f" (entries with it: {', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''})"
               if len(ids) > 1 else ""))


def build_run(raw: dict, registry: Registry,
              base: Callable[[str], str] = lambda key_path: os.getcwd()) -> RunConfig:
    """Build and check a whole run; `base(key path)`: where that key's relative paths start."""
    run = build(RunConfig, raw, "")
    if "scenarios" not in raw:
        raise ConfigError("scenarios: missing (required): a list of scenario entries, e.g. "
                          "[{scenario: legendre_fit}]")
    entries = raw["scenarios"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"scenarios: must be a non-empty list of scenario entries, "
                          f"got {show(entries)}")
    run.scenarios = [build_entry(e, f"scenarios[{i}]", registry, base)
                     for i, e in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, entry in enumerate(run.scenarios):
        if entry.id in seen:
            raise ConfigError(f"scenarios[{i}].id: duplicate id '{entry.id}' "
                              f"(also scenarios[{seen[entry.id]}]); give each entry its own id")
        seen[entry.id] = i
    return run


def build_entry(raw: Any, where: str, registry: Registry,
                base: Callable[[str], str]) -> ScenarioConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping with a 'scenario' key, got {show(raw)}")
    name = raw.get("scenario")
    if name is None:
        raise ConfigError(f"{where}.scenario: missing (required; see --list)")
    if not isinstance(name, str) or name not in registry:
        raise ConfigError(f"{where}.scenario: unknown scenario {show(name)}"
                          f"{did_you_mean(str(name), registry)}")
    scenario = registry[name]
    raw = dict(raw)
    for f in dataclasses.fields(scenario.config):
        kind = f.metadata.get("path")
        if kind and isinstance(raw.get(f.name), str) and raw[f.name]:
            raw[f.name] = resolve_path(raw[f.name], kind, base(f"{where}.{f.name}"))
    entry = build(scenario.config, raw, where)
    if entry.id is None:
        entry.id = name
    if not NAME_RE.fullmatch(entry.id):
        raise ConfigError(f"{where}.id: must be a folder-safe name (letters, digits, _ . -; at "
                          f"most 100), got {show(entry.id)}")
    if reserved(entry.id):
        raise ConfigError(f"{where}.id: '{entry.id}' is a file of the run folder itself; "
                          f"choose another id")
    known = {"params": scenario.params, "metrics": scenario.metrics}
    check_tolerance_keys(entry.tolerance, known, f"{where}.tolerance")
    keys = [f.name for f in dataclasses.fields(entry) if f.name not in ("expect", "id")]
    hints = typing.get_type_hints(type(entry))
    for key, value in entry.expect.written_for.items():  # typed as the settings they name
        at = f"{where}.expect.written_for.{key}"
        if key != "seed" and key not in keys:
            raise ConfigError(f"{at}: {name} has no setting '{key}'"
                              f"{did_you_mean(key, [*keys, 'seed'])}")
        entry.expect.written_for[key] = convert(int if key == "seed" else hints[key], value, at)
    for kind, names in known.items():
        for key in getattr(entry.expect, kind):
            if key not in names:  # kind[:-1]: param, metric
                raise ConfigError(f"{where}.expect.{kind}.{key}: {name} has no {kind[:-1]} "
                                  f"'{key}'{did_you_mean(key, names)}")
    return entry


def resolve_path(value: str, kind: str, base: str) -> str:
    """A relative path made absolute against `base`; for code ('file.py:Attr' or
    'pkg.module:Attr'), a module found as a file under `base` becomes 'path/to/file.py:Attr'.
    """
    if kind != "code":
        return absolute(value, base)
    try:
        module, attribute = split_spec(value, "")
    except ConfigError:
        return value  # left as written: the scenario's validation names the problem
    if is_path(module, base):
        return f"{absolute(module, base)}:{attribute}"
    stem = os.path.join(base, *module.split("."))
    for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
        if os.path.isfile(candidate):
            return f"{os.path.normpath(candidate)}:{attribute}"
    return value  # an installed module, imported by name when the run starts


def absolute(path: str, base: str) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def select(run: RunConfig, only: str, source: str) -> RunConfig:
    """Keep the entries named in `only` ('a,b'), in config order."""
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    if not wanted:
        raise ConfigError(f"--only {visible(only)}: names no scenario entry; e.g. "
                          f"--only {run.scenarios[0].id}")
    ids = [e.id for e in run.scenarios]
    for w in wanted:
        if w not in ids:
            raise ConfigError(f"--only {visible(only)}: {source} has no scenario entry with "
                              f"id {w!r}{did_you_mean(w, ids)}")
    return dataclasses.replace(run, scenarios=[e for e in run.scenarios if e.id in wanted])


def shrink(run: RunConfig, registry: Registry,
           keep: Collection[tuple[str, str]] = ()) -> RunConfig:
    """The --dry-run version: every entry with its scenario's tiny sizes, but for the
    (entry id, key) pairs in `keep`: what --set gave explicitly (RunConfig.explicit)."""
    return dataclasses.replace(run, scenarios=[
        registry[e.scenario].shrink(e, {k for i, k in keep if i == e.id})
        for e in run.scenarios])


def dump(run: RunConfig) -> str:
    """The resolved config as YAML that `load` accepts again (unset optional keys left out)."""
    import yaml

    return yaml.safe_dump(drop_unset(to_dict(run)), sort_keys=False, default_flow_style=None)


def drop_unset(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: drop_unset(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [drop_unset(v) for v in data]
    return data


def entry_dict(entry: ScenarioConfig) -> dict:
    """One entry's resolved config as plain data."""
    return drop_unset(to_dict(entry))
