"""Loading a user's code named in a config: 'path/to/file.py:Attr' or 'installed.module:Attr'.

Called when the run starts, never while a config is loaded. A file is loaded by its path under
a module name made from that path, so two folders that each hold a `my_ops.py` never get each
other's module. While it loads, its folder is on sys.path, for the modules it imports itself.
Loading runs the module's code, with the same trust as running it as a script. Every failure
is a ConfigError naming the key, the module and the attribute.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

from demos.lab.schema import ConfigError, did_you_mean


def load_object(spec: str, where: str) -> Any:
    """The object named by `spec` ('file.py:Attr.sub' or 'pkg.module:Attr'), loading its module."""
    module_part, sep, attribute = spec.rpartition(":")
    if not sep or not module_part or not attribute:
        raise ConfigError(f"{where}: expected module:attribute (e.g. my_ops:MyCube), got {spec!r}")
    if module_part.endswith(".py"):
        module, shown = load_file(module_part, where), os.path.basename(module_part)
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


def load_file(path: str, where: str) -> ModuleType:
    """The module in the file `path`, loaded once per path."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: {path}: no such file")
    stem = os.path.splitext(os.path.basename(path))[0]
    digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = f"_user_{digest}_{''.join(c if c.isalnum() else '_' for c in stem)}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        raise failure(e, os.path.basename(path), where) from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def import_module(name: str, where: str) -> ModuleType:
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
    """A module that raised while loading (a SyntaxError, anything): one line; Ctrl-C stays."""
    if isinstance(e, (KeyboardInterrupt, SystemExit)):
        return e
    first = str(e).splitlines()[0] if str(e) else ""
    return ConfigError(f"{where}: importing module '{shown}' raised {type(e).__name__}: {first}")
