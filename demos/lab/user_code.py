"""Importing a user's code named in a config as 'module:attribute'.

The module is looked up in the config file's folder first, then on sys.path. Importing runs
the module's code, with the same trust as running it as a script. Every failure is a
ConfigError naming the module and the attribute.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from demos.lab.schema import ConfigError, did_you_mean


def import_object(spec: str, base_dir: str, where: str) -> Any:
    """The object named by `spec` ('pkg.module:Attr.sub'), importing its module."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"{where}: expected module:attribute (e.g. my_ops:MyCube), got {spec!r}")
    base_dir = os.path.abspath(base_dir or ".")
    sys.path.insert(0, base_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ConfigError(f"{where}: cannot import module '{module_name}' (looked in "
                              f"{base_dir} and on sys.path)") from None
        raise ConfigError(f"{where}: importing module '{module_name}' failed: {e}") from None
    except BaseException as e:  # a SyntaxError, or anything the module's code raised
        if isinstance(e, KeyboardInterrupt):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"{where}: importing module '{module_name}' raised "
                          f"{type(e).__name__}: {first}") from None
    finally:
        if base_dir in sys.path:
            sys.path.remove(base_dir)
    obj = module
    for i, part in enumerate(attribute.split(".")):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attribute.split('.')[:i])}"
            raise ConfigError(f"{where}: module '{owner}' has no attribute '{part}'"
                              f"{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    return obj
