"""YAML read safely: `yaml.safe_load` only, after refusing what a config never holds (alias
bombs, nesting past any real config, duplicate keys, YAML 1.1's surprising numbers, binary or
huge files). Every failure is one ConfigError line naming the file and the line."""
from __future__ import annotations

import os
import re
from typing import Any

from demos.lab.core.schema import ConfigError, show

MAX_CONFIG_BYTES = 1 << 20   # a config is a page of YAML; a megabyte is plenty
MAX_DEPTH = 64  # levels of nesting: the deepest real config has 8
MAX_CONFIG_NODES = 100_000   # values after expanding aliases: refuses "billion laughs" bombs


def read_yaml(path: str) -> Any:
    """Parse a YAML file with `yaml.safe_load`; every failure is a one-line ConfigError."""
    from demos.lab.core.files import NotReadable, read_bytes

    try:
        data = read_bytes(path, MAX_CONFIG_BYTES)
    except NotReadable as e:
        said = str(e)
        raise ConfigError(f"{path}: {said}" + (
            nearby(path) if said == "no such file" else ", not a config file"
            if said == "is a directory" else "; not a config file"
            if said.startswith(("larger", "not a regular")) else "")) from None
    return parse_yaml(data, path)


def nearby(path: str) -> str:
    """' (did you mean ...?)': a config beside the missing `path`, or in configs/ for a bare
    name; '' when none is close."""
    import difflib

    folder, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    places = [folder or "."] + (["configs"] if not folder else [])
    for place in places:
        try:
            found = sorted(f for f in os.listdir(place) if f.endswith((".yaml", ".yml")))
        except OSError:
            continue
        close = difflib.get_close_matches(name, found, n=1, cutoff=0.6) or \
            difflib.get_close_matches(stem, [os.path.splitext(f)[0] for f in found], n=1,
                                      cutoff=0.6)
        if close:
            hit = next(f for f in found if f == close[0] or os.path.splitext(f)[0] == close[0])
            return f" (did you mean '{os.path.join(place, hit) if place != '.' else hit}'?)"
    return ""


def parse_yaml(data: bytes, path: str) -> Any:
    """YAML text -> data, refusing alias bombs and deep nesting before anything is built."""
    if b"\x00" in data:
        raise ConfigError(f"{path}: binary file, not YAML")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_text(text, path, empty="empty file")


def parse_text(text: str, where: str, empty: str | None = None) -> Any:
    """YAML text -> data, its node graph's size checked before anything is built; a problem
    is a ConfigError that begins with `where`. No document at all (blank, comments): None, or
    the error `empty` where given."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # the node graph: aliases shared
        if node is None:
            if empty is not None:
                raise ConfigError(empty)
            return None
        check_size(node)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: {yaml_error(e)}") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid YAML: nested too deeply") from None
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def check_size(root: Any) -> None:
    """Refuse a YAML node graph nested too deeply, that expands to too many values or refers
    to itself (each node counted once: aliases share nodes); its keys and numbers checked."""
    import yaml

    size: dict[int, int] = {}  # the values under a node counted so far, aliases expanded
    open_nodes: set[int] = set()  # the nodes being counted: their children are under way

    def count(node: Any, depth: int) -> int:
        line = node.start_mark.line + 1
        if depth > MAX_DEPTH:
            raise ConfigError(f"line {line}: nested more than {MAX_DEPTH} levels deep; "
                              f"refusing it")
        if id(node) in size:
            return size[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(f"line {line}: an alias refers to the value that contains it")
        if isinstance(node, yaml.MappingNode):
            check_keys(node)
            children = [c for pair in node.value for c in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            check_number(node)
            children = []
        open_nodes.add(id(node))
        size[id(node)] = 1 + sum(count(c, depth + 1) for c in children)
        open_nodes.discard(id(node))
        if size[id(node)] > MAX_CONFIG_NODES:
            raise ConfigError(f"line {line}: holds more than {MAX_CONFIG_NODES:,} values "
                              f"(counting each use of an alias, *name); refusing it")
        return size[id(node)]

    count(root, 1)


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
