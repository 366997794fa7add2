"""The run config: YAML file -> `--set` overrides -> strictly validated, typed `RunConfig`.

Generic: the scenarios come in as a registry {name: Scenario}. Loading validates and nothing
else: it imports no torch and no user code. Every problem is a `ConfigError` with one line
naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from demos.lab.core.tolerance import check_keys as check_tolerance_keys
from demos.lab.core.scenario import Expect, Registry, ScenarioConfig, Target  # noqa: F401 (re-exported)
from demos.lab.core.schema import ConfigError, build, did_you_mean, join, param, show, to_dict
from demos.lab.core.user_code import is_path, split_spec

DEVICE_RE = re.compile(r"auto|cpu|mps|cuda(:\d{1,3})?")  # whole strings only: fullmatch
ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")  # an entry's id, its folder's name
MAX_CONFIG_BYTES = 1 << 20   # a config is a page of YAML; a megabyte is plenty
MAX_DEPTH = 64  # levels of nesting: the deepest real config has 8
MAX_CONFIG_NODES = 100_000   # values after expanding aliases: refuses "billion laughs" bombs
RUN_FILES = {"config.yaml", "run.log", "summary.json", "report.html", "index.html"}


@dataclass
class RunConfig:
    """A whole run: where, how seeded, and the scenario entries in order."""
    device: str = param("auto", "auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps")
    seed: int = param(0, "seed of torch's generators, set before each scenario (so --only gives "
                         "the same numbers)", ge=0, le=2**63 - 1)
    threads: int | Literal["auto"] = param(
        "auto", "CPU threads for torch: auto (1 on a machine with up to 2 cores, else half the "
                "cores, at most 8) or a number; trained values depend on it (README, "
                "Reproducible)", ge=1,
        le=1024)
    deterministic: bool = param(False, "torch.use_deterministic_algorithms(True) for the run "
                                       "(and cuDNN benchmark off): bit-identical GPU runs, "
                                       "sometimes slower. CPU runs are reproducible without it")
    scenarios: list[Any] = param([], "the scenario entries, run in this order")

    def validate(self, where: str) -> None:
        if not DEVICE_RE.fullmatch(self.device):
            raise ConfigError(f"{join(where, 'device')}: must be auto, cpu, cuda, cuda:N or mps, "
                              f"got {show(self.device)}")


def auto_threads(cores: int) -> int:
    """`threads: auto`: 1 on up to 2 cores (two threads wait on each other as soon as anything
    else wants a core), else half the cores, at most 8 (the scenarios' tensors are small)."""
    return 1 if cores <= 2 else min(8, cores // 2)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def read_yaml(path: str) -> Any:
    """Parse a YAML file with `yaml.safe_load`; every failure is a one-line ConfigError."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a directory, not a config file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a config file")
    return parse_yaml(data, path)


def parse_yaml(data: bytes, path: str) -> Any:
    """YAML text -> data, refusing alias bombs and deep nesting before anything is built."""
    import yaml

    if b"\x00" in data:
        raise ConfigError(f"{path}: binary file, not YAML")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # the node graph: aliases shared
        if node is None:
            raise ConfigError("empty file")
        check_size(node)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: {yaml_error(e)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def check_size(root: Any) -> None:
    """Refuse a YAML node graph that expands to too many values or refers to itself."""
    import yaml

    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(root, False, 1)]
    while stack:
        node, done, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} "
                              f"levels deep; refusing it")
        if isinstance(node, yaml.MappingNode):
            children = [c for pair in node.value for c in pair]
            if not done:
                check_keys(node)
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
            check_number(node)
        if done:
            open_nodes.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_CONFIG_NODES:
                raise ConfigError(f"line {node.start_mark.line + 1}: holds more than "
                                  f"{MAX_CONFIG_NODES:,} values (counting each use of an "
                                  f"alias, *name); refusing it")
            continue
        if id(node) in size:
            continue
        if id(node) in open_nodes:
            raise ConfigError(f"line {node.start_mark.line + 1}: an alias refers to the "
                              f"value that contains it")
        open_nodes.add(id(node))
        stack.append((node, True, depth))
        stack.extend((c, False, depth + 1) for c in children if id(c) not in size)


def check_number(node: Any) -> None:
    """YAML 1.1 reads 1:30 as 90 (base 60), 010 as 8 (octal), 0x10 as 16: refuse the
    surprise and ask for the number itself."""
    text = node.value if node.tag.endswith((":int", ":float")) else ""
    kind = ("base-60" if ":" in text else
            "hexadecimal" if re.fullmatch(r"[-+]?0x[0-9a-fA-F_]+", text) else
            "octal" if re.fullmatch(r"[-+]?0[0-7_]+", text) else
            "binary" if re.fullmatch(r"[-+]?0b[01_]+", text) else None)
    if kind:
        import yaml

        value = yaml.safe_load(text)
        raise ConfigError(f"line {node.start_mark.line + 1}: {text} is a YAML 1.1 {kind} "
                          f"number ({value}); write {value} if you mean it, or quote it")


def check_keys(node: Any) -> None:
    """A key given twice in one mapping: YAML would silently keep the last one."""
    import yaml

    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
            if key.value in seen:
                raise ConfigError(f"line {key.start_mark.line + 1}: duplicate key "
                                  f"{show(key.value)}; YAML would keep only the last")
            seen.add(key.value)


def yaml_error(e: Exception) -> str:
    """A YAML error as 'line L, column C: problem', with a hint for the common ones."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    if "'\\t'" in problem or "\t" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    if "python/" in problem:
        problem = ("a tag that would build a Python object; configs hold plain values only "
                   f"({problem})")
    return f"invalid YAML: {where}{problem}"


def entry_id(raw: Any) -> Any:
    return raw.get("id", raw.get("scenario")) if isinstance(raw, dict) else None


def printable(text: str) -> str:
    """A command-line value as an error message can show it on one line."""
    return text if text.isprintable() else repr(text)


def apply_set(raw: dict, assignment: str) -> str:
    """Apply one `--set KEY=VALUE` to the raw config; return the key path it sets."""
    import yaml

    shown = printable(assignment)
    key, sep, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {shown}: expected KEY=VALUE, e.g. seed=3 or "
                          f"scenarios.<id>.lr=1e-5")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
        if node is not None:
            check_size(node)
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


def load(path: str, registry: Registry, sets: list[str] = ()) -> RunConfig:
    """Read, override and validate a run config; raise ConfigError('<file>: <key>: ...')."""
    return load_data(read_yaml(path), path, registry, sets)


def load_data(raw: Any, path: str, registry: Registry, sets: list[str] = ()) -> RunConfig:
    """Override and validate parsed config data read from `path`.

    Validation only: nothing is imported or run. Relative paths are made absolute (see
    `resolve_path`), so the dumped config runs again from anywhere.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level: must be a mapping with a 'scenarios' list, "
                          f"got {show(raw)}")
    set_paths = {}
    for assignment in sets:
        set_paths[apply_set(raw, assignment)] = assignment
    bases = Bases(os.path.dirname(os.path.abspath(path)), set(set_paths))
    try:
        return build_run(raw, registry, bases)
    except ConfigError as e:
        msg = str(e)
        for key_path, assignment in set_paths.items():
            if msg.startswith(key_path + ":") or msg.startswith(key_path + "."):
                msg += f" (from --set {printable(assignment)})"
        raise ConfigError(f"{path}: {msg}") from None


@dataclass
class Bases:
    """Where relative paths start: the config file's folder, or the current one for --set."""
    config_dir: str
    set_keys: set[str]

    def base(self, key_path: str) -> str:
        return os.getcwd() if key_path in self.set_keys else self.config_dir


def build_run(raw: dict, registry: Registry, bases: Bases | None = None) -> RunConfig:
    bases = bases or Bases(os.getcwd(), set())
    run = build(RunConfig, raw, "")
    if "scenarios" not in raw:
        raise ConfigError("scenarios: missing (required): a list of scenario entries, e.g. "
                          "[{scenario: legendre_fit}]")
    entries = raw["scenarios"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"scenarios: must be a non-empty list of scenario entries, "
                          f"got {show(entries)}")
    run.scenarios = [build_entry(e, f"scenarios[{i}]", registry, bases)
                     for i, e in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, entry in enumerate(run.scenarios):
        if entry.id in seen:
            raise ConfigError(f"scenarios[{i}].id: duplicate id '{entry.id}' "
                              f"(also scenarios[{seen[entry.id]}]); give each entry its own id")
        seen[entry.id] = i
    return run


def build_entry(raw: Any, where: str, registry: Registry, bases: Bases) -> ScenarioConfig:
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
            raw[f.name] = resolve_path(raw[f.name], kind, bases.base(f"{where}.{f.name}"))
    entry = build(scenario.config, raw, where)
    if entry.id is None:
        entry.id = name
    if not ID_RE.fullmatch(entry.id):
        raise ConfigError(f"{where}.id: must be a folder-safe name (letters, digits, _ . -; at "
                          f"most 100), got {show(entry.id)}")
    if entry.id in RUN_FILES or re.fullmatch(r"rank\d+\.log", entry.id):
        raise ConfigError(f"{where}.id: '{entry.id}' is a file of the run folder itself; "
                          f"choose another id")
    check_tolerance_keys(entry.tolerance, {"params": scenario.params, "metrics": scenario.metrics},
               f"{where}.tolerance")
    for kind, known in (("params", scenario.params), ("metrics", scenario.metrics)):
        for targets, at in ((entry.expect, "expect"), (entry.expect.sweep, "expect.sweep")):
            for key in getattr(targets, kind):
                if key not in known:
                    what = "param" if kind == "params" else "metric"
                    raise ConfigError(f"{where}.{at}.{kind}.{key}: {name} has no {what} "
                                      f"'{key}'{did_you_mean(key, known)}")
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
        raise ConfigError(f"--only {printable(only)}: names no scenario entry; e.g. "
                          f"--only {run.scenarios[0].id}")
    ids = [e.id for e in run.scenarios]
    for w in wanted:
        if w not in ids:
            raise ConfigError(f"--only {printable(only)}: {source} has no scenario entry with "
                              f"id {w!r}"
                              f"{did_you_mean(w, ids)}")
    return dataclasses.replace(run, scenarios=[e for e in run.scenarios if e.id in wanted])


def shrink(run: RunConfig, registry: Registry) -> RunConfig:
    """The --dry-run version: every entry with its scenario's tiny sizes."""
    return dataclasses.replace(run, scenarios=[registry[e.scenario].shrink(e)
                                               for e in run.scenarios])


def dump(run: RunConfig) -> str:
    """The resolved config as YAML that `load` accepts again (unset optional keys left out)."""
    import yaml

    return yaml.safe_dump(prune(to_dict(run)), sort_keys=False, default_flow_style=None)


def prune(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: prune(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [prune(v) for v in data]
    return data


def entry_dict(entry: ScenarioConfig) -> dict:
    """One entry's resolved config as plain data."""
    return prune(to_dict(entry))
