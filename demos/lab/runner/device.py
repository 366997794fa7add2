"""Where and how torch runs: the device (auto: cuda > mps > cpu, or exactly what was asked
for, if it is there), its CPU threads, and deterministic algorithms when asked for."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import torch

from demos.lab.core.schema import ConfigError
from demos.lab.core.threads import auto_threads, available_cores  # noqa: F401 (re-exported)


def resolve_device(spec: str) -> tuple[torch.device, str]:
    """The torch.device for `spec` and a line saying why; ConfigError if it is not available."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda"), f"auto: chose cuda ({torch.cuda.get_device_name(0)})"
        if torch.backends.mps.is_available():
            return torch.device("mps"), "auto: chose mps (no CUDA)"
        return torch.device("cpu"), "auto: chose cpu (no CUDA or MPS available)"
    device = torch.device(spec)  # the config's check (DEVICE_RE) spells devices as torch does
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"CUDA is not available on this machine "
                              f"(torch {torch.__version__}); use --device cpu or auto")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(f"there are {count} CUDA device(s), "
                              f"numbered 0..{count - 1}")
        return device, f"{spec} ({torch.cuda.get_device_name(device.index or 0)})"
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("MPS is not available on this machine; "
                          "use --device cpu or auto")
    return device, spec


@contextlib.contextmanager
def torch_settings(threads: int | str, deterministic: bool, share: int = 1) -> Iterator[dict]:
    """Torch's global settings for a run, restored afterwards; yields them as recorded.

    Only what was asked for is touched: reading or setting deterministic algorithms imports
    torch's compiler stack (2 s), so that happens only with `deterministic: true`. A caller's
    own settings (demos.run inside no_grad, after set_default_dtype(float64)) do not reach the
    run: it runs as from the command line, float32 by default, on the CPU, with grad enabled.
    """
    kept = {name: SETTINGS[name][0]() for name in ("torch's CPU threads", "torch's default dtype",
                                                    "torch's default device")}
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    # `share` processes on this machine (torchrun's ranks): auto gives each its part
    cores = max(1, available_cores() // share)
    torch.set_num_threads(auto_threads(cores) if threads == "auto" else int(threads))
    before = None
    if deterministic:
        before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield {"deterministic_algorithms": deterministic,
                   "cudnn_deterministic": torch.backends.cudnn.deterministic,
                   "cudnn_benchmark": torch.backends.cudnn.benchmark,
                   "threads": threads, "cpu_threads": torch.get_num_threads(),
                   "seeded": "torch.manual_seed(seed) before each scenario; a generator a "
                             "scenario makes itself (a data split, shuffles) is seeded the "
                             "same"}
    finally:
        for name, value in kept.items():
            SETTINGS[name][1](value)
        if before is not None:
            torch.use_deterministic_algorithms(before[0])
            torch.backends.cudnn.benchmark = before[1]


# variables torch adds by itself on first use (torch.compile's cache folder): set back, unsaid
TORCH_SETS = ("TORCHINDUCTOR_", "TRITON_")

# The process-wide settings that user code may change behind a run's back (at import, or in a
# forward), besides the environment: {name: (read it, set it)}.
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
        if now[name] == value:
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
    return str(value)
