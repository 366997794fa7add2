"""Where and how torch runs: the device (auto: cuda > mps > cpu, or exactly what was asked
for, if it is there), its CPU threads, and deterministic algorithms when asked for."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

from demos.lab.core.machine import auto_threads, available_cores  # noqa: F401 (re-exported)
from demos.lab.core.schema import ConfigError
from demos.lab.state import SETTINGS


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
