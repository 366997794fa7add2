"""Loading a user's code named in a config: 'path/to/file.py:Attr' or 'installed.module:Attr',
when the run starts, never while a config is loaded; how a file loads (a package made for its
folder, neighbours forgotten after) and why: demos/docs/checks.md. Every failure is a
ConfigError naming the key, the module and the attribute; only Ctrl-C stays Ctrl-C.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar

from demos.lab.core.schema import ConfigError, convert, did_you_mean
from demos.lab.core.text import one_line


@dataclass(frozen=True)
class Code:
    """User code a config names, as config.yaml records it (`spec`: 'file.py:Attr' or
    'module:Attr'), and the object itself once it is here (`value`): given from Python
    (check_function), or loaded when the run starts (Scenario.prepare)."""
    spec: str
    value: Any = field(default=None, compare=False, repr=False)
    shown_as: ClassVar[str] = "str"  # in the config's docs: a config gives its text

    @classmethod
    def from_config(cls, value: Any, where: str) -> Code:
        return value if isinstance(value, cls) else cls(convert(str, value, where))

    def to_config(self) -> str:
        return self.spec

    def __deepcopy__(self, memo: Any) -> Code:  # the object is the caller's, never a copy
        return self


@dataclass(frozen=True)
class Supplied:
    """A value handed to the run from Python (check_function's tensors and arguments): itself,
    never a copy, and what config.yaml and the report record for it (`shown`; None: nothing,
    as for a tensor, which its shape and dtype describe)."""
    value: Any = field(compare=False, repr=False)
    shown: Any = None

    def to_config(self) -> Any:
        return self.shown

    def __deepcopy__(self, memo: Any) -> Supplied:
        return self


def split_spec(spec: str, where: str) -> tuple[str, str]:
    """'module:attribute' -> (module, attribute); a ConfigError for anything else."""
    module, sep, attribute = spec.rpartition(":")
    if not sep or not module or not attribute or not attribute.replace(".", "").isidentifier():
        raise ConfigError(f"{where}: expected module:attribute (e.g. my_ops:MyCube), got {spec!r}")
    return module, attribute


def is_path(module: str, base: str = "") -> bool:
    """Whether the module part names a file ('ops.py', 'sub/ops.py', 'ops.txt' that exists in
    `base`) rather than an importable module ('ops', 'pkg.ops')."""
    return (module.endswith(".py") or "/" in module or os.sep in module
            or os.path.exists(os.path.join(base, module)))


# every file of the user's code loaded in this process, with a digest of what was read from it
# (--watch: a file saved while the first run that loaded it went on is a change after it)
loaded: dict[str, str | None] = {}
# names the user's code of this run defines process-wide (custom ops): {name: its file}
claimed: dict[str, str] = {}


def digest(path: str) -> str | None:
    """A file's content as a short digest; None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return None


def forget_all() -> None:
    """Unload the user's code loaded from files, so that the next run loads it anew from disk
    (--watch): the folders' packages and every module in them; what they claimed and loaded."""
    for name in [n for n in sys.modules if n.startswith("_user_")]:
        del sys.modules[name]
    claimed.clear()
    loaded.clear()


def new_run() -> list[str]:
    """A run starts (of the command line or demos.run, in a process that ran others): nothing
    claimed yet; a file of the user's code changed since it loaded, all of it loads anew, as
    --watch does. The files changed."""
    claimed.clear()
    changed = [path for path, read in loaded.items() if digest(path) != read]
    if changed:
        forget_all()
    return changed


def claim(name: str, path: str, where: str) -> None:
    """`path` defines `name` for the whole process: a ConfigError naming both files where
    another file of this run did (torch keeps one custom op of a name: never shadowed)."""
    first = claimed.setdefault(name, path)
    if first != path:
        raise ConfigError(f"{where}: {name} is defined by both {first} and {path}: the process "
                          f"keeps the last one defined, and the other's checks would run its "
                          f"code; give them different names")


def current(obj: Any, where: str) -> tuple[Any, str | None]:
    """`obj` (a class or function given to check_function) as its file defines it now: where a
    user's module `changed` since it loaded, it loads again (as --watch does) and the object of
    the same name is taken from it; with the file (None: unchanged)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    name = getattr(obj, "__qualname__", "")
    if module is None or "<locals>" in name or not changed(module):
        return obj, None
    path = module.__file__ or ""
    try:
        module = load_file(path, where, again=True) if module.__name__.startswith("_user_") \
            else importlib.reload(module)
        for part in name.split("."):
            module = getattr(module, part)
    except AttributeError:
        raise ConfigError(f"{where}: {path} changed since it was loaded and no longer defines "
                          f"{name}") from None
    except BaseException as e:
        raise failure(e, os.path.basename(path), where) from None
    return module, path


LAB = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def changed(module: types.ModuleType) -> bool:
    """Whether the file of `module`, a user's (not __main__, Python's, an installed package's,
    this lab's, or compiled by an import hook), no longer holds what it was loaded from: the
    digest of what this lab read; for a module imported otherwise, its functions and methods
    against the file compiled again (a change made in memory since is not the file's)."""
    path = os.path.abspath(getattr(module, "__file__", None) or "")
    if module.__name__.startswith("_user_"):
        return path in loaded and digest(path) != loaded[path]
    loader = getattr(module, "__loader__", None)  # pytest's own, for a test: rewritten code
    if module.__name__ == "__main__" or "-packages" + os.sep in path or not isinstance(
            loader, importlib.machinery.SourceFileLoader) or path.startswith(
            (sys.prefix + os.sep, sys.base_prefix + os.sep, LAB)):
        return False
    try:
        with open(path, "rb") as f:
            codes = [compile(f.read(), path, "exec", dont_inherit=True)]
    except (OSError, SyntaxError, ValueError):
        return True  # gone, or no longer Python: loading it again says so
    for code in codes:  # every function and class body in the file, nested ones too
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    held = [getattr(getattr(f, "__func__", f), "__code__", None) for c in vars(module).values()
            if getattr(c, "__module__", None) == module.__name__
            for f in (vars(c).values() if isinstance(c, type) else [c])]
    return any(c is not None and c.co_filename == path and c not in codes for c in held)


def load_object(spec: str, where: str, again: bool = False) -> Any:
    """The object named by `spec` ('file.py:Attr.sub' or 'pkg.module:Attr'), loading its module;
    `again`: its file loads anew, even if loaded before."""
    module_part, attribute = split_spec(spec, where)
    if is_path(module_part):
        module, shown = load_file(module_part, where, again), os.path.basename(module_part)
    else:
        module, shown = import_module(module_part, where), module_part
    obj = module
    for i, part in enumerate(attribute.split(".")):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            owner = shown if i == 0 else f"{shown}:{'.'.join(attribute.split('.')[:i])}"
            raise ConfigError(f"{where}: module '{owner}' has no attribute '{part}'"
                              f"{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    return obj


def load_file(path: str, where: str, again: bool = False) -> types.ModuleType:
    """The module in the file `path`, loaded once per path (`again`: anew)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{where}: {path}: is a folder, not a .py file")
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: {path}: no such file")
    if not path.endswith(".py"):
        raise ConfigError(f"{where}: {path}: not a .py file")
    folder = os.path.dirname(path)
    package = folder_package(folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"{package}.{''.join(c if c.isalnum() else '_' for c in stem)}"
    if name in sys.modules and not again:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    loaded[path] = digest(path)  # what the import is about to read
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    before, bytecode = set(sys.modules), sys.dont_write_bytecode
    sys.path.insert(0, folder)
    sys.dont_write_bytecode = True  # no __pycache__ in the user's folder: nothing written there
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        raise failure(e, os.path.basename(path), where) from None
    finally:
        sys.dont_write_bytecode = bytecode
        if folder in sys.path:
            sys.path.remove(folder)
        forget_neighbours(folder, set(sys.modules) - before)
    return module


def folder_package(folder: str) -> str:
    """A package standing for `folder` (named after its path), so its files import relatively."""
    digest = hashlib.sha1(folder.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = f"_user_{digest}"
    if name not in sys.modules:
        package = types.ModuleType(name, f"the folder {folder}")
        package.__path__ = [folder]
        sys.modules[name] = package
    return name


def forget_neighbours(folder: str, names: set[str]) -> None:
    """Drop modules imported by name from `folder`, so another folder's namesakes load anew."""
    for name in names:
        file = os.path.abspath(getattr(sys.modules.get(name), "__file__", None) or "")
        if os.path.dirname(file) == folder:  # a neighbour it imported: watched too
            if file not in loaded:
                loaded[file] = digest(file)
            if not name.startswith("_user_"):
                del sys.modules[name]


def import_module(name: str, where: str) -> types.ModuleType:
    """An installed module, imported by name from sys.path."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise ConfigError(f"{where}: cannot import module '{name}' (no such file beside "
                              f"the config, and not on sys.path)") from None
        raise ConfigError(f"{where}: importing module '{name}' failed: {e}") from None
    except BaseException as e:
        raise failure(e, name, where) from None


def failure(e: BaseException, shown: str, where: str) -> BaseException:
    """A module that raised while loading (a SyntaxError, sys.exit(), anything): one line.
    Ctrl-C stays Ctrl-C."""
    if isinstance(e, KeyboardInterrupt):
        return e
    return ConfigError(f"{where}: importing module '{shown}' raised {one_line(e)}")
