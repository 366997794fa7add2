"""The process's global state that user code may change behind a run's back (at import, or in a
forward): torch's settings, its compiler's, the working directory, the environment; read, and
set back, by the runner around each entry and by the support matrix around its rows."""
from __future__ import annotations

import copy
import os
import sys
from typing import Any, Callable

import torch
from torch.utils._config_module import _UNSET_SENTINEL as UNSET
from torch.utils._config_module import ConfigModule

# variables torch adds by itself on first use (torch.compile's cache folder): set back, unsaid
TORCH_SETS = ("TORCHINDUCTOR_", "TRITON_")

# besides the environment: {name: (read it, set it)}
SETTINGS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
    "torch's default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "torch's default device": (torch.get_default_device, lambda device: torch.set_default_device(
        None if device.type == "cpu" else device)),
    "torch's CPU threads": (torch.get_num_threads, torch.set_num_threads),
    "torch's grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "torch's anomaly detection": (
        lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        lambda on: torch.autograd.set_detect_anomaly(*on)),
    "torch's float32 matmul precision": (torch.get_float32_matmul_precision,
                                         torch.set_float32_matmul_precision),
    "torch's deterministic algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(),
                 torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda on: torch.use_deterministic_algorithms(on[0], warn_only=on[1])),
    "the working directory": (os.getcwd, os.chdir),
}


def compiler_settings() -> dict[tuple[str, str], Any]:
    """torch's compiler and functorch settings away from their defaults, {(module, key): a copy},
    of every torch config module imported (torch._dynamo.config, torch._functorch.config ...),
    read from torch's record of what was set: reading them imports and warns of nothing."""
    return {(name, key): copy.deepcopy(v) for name, m in list(sys.modules.items())
            if isinstance(m, ConfigModule) for key, entry in m._config.items()
            if (v := entry.user_override.get()) is not UNSET and not same_setting(v, entry.default)}


def use_compiler_settings(values: dict[tuple[str, str], Any]) -> None:
    """torch's config modules set to `values` (compiler_settings()'s; a key left out: default)."""
    now = compiler_settings()
    for name, key in {*now, *values}:
        if not same_setting(now.get((name, key), UNSET), values.get((name, key), UNSET)):
            module = sys.modules[name]  # as its own __setattr__ does, and back to unset
            module._config[key].user_override.set(values.get((name, key), UNSET))
            module._hash_dirty_var.set(True), module._get_dict_dirty_keys_var.set(None)


def same_setting(a: Any, b: Any) -> bool:
    try:
        return a is b or type(a) is type(b) and bool(a == b)
    except Exception:  # a value that will not compare (an array): taken as changed
        return False


SETTINGS["torch's compiler settings"] = (compiler_settings, use_compiler_settings)


def global_state() -> dict[str, Any]:
    """SETTINGS and the environment, as they are now. Each entry starts with the run's own, so
    that an entry's numbers do not depend on the entries around it (--only gives the same
    numbers), and relative paths keep their meaning."""
    return {**{name: read() for name, (read, _) in SETTINGS.items()},
            "the environment": dict(os.environ)}


def restore_global_state(before: dict[str, Any]) -> list[str]:
    """Set back what changed since `before` (global_state()); say what it was, as
    "torch's default dtype torch.float64 (the run's: torch.float32)"."""
    now, said = global_state(), []
    for name, value in before.items():
        if same_setting(now[name], value):
            continue
        if name != "the environment":
            said.append(f"{name} {show_setting(now[name])} (the run's: {show_setting(value)})")
            SETTINGS[name][1](value)
            continue
        keys = sorted(k for k in set(value) | set(now[name])  # names only: values may be secrets
                      if value.get(k) != now[name].get(k)
                      and not (k not in value and k.startswith(TORCH_SETS)))
        if keys:
            said.append(f"the environment variable(s) {', '.join(keys)}")
        os.environ.clear()
        os.environ.update(value)
    return said


def show_setting(value: Any) -> str:
    if isinstance(value, tuple):  # (enabled, a second flag)
        return "on" if value[0] else "off"
    if isinstance(value, dict):  # compiler settings: what is not at its default
        return ", ".join(f"{m}.{k} = {v!r}" for (m, k), v in value.items()) or "the defaults"
    return str(value)
