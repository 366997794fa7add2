"""Choosing the device: auto (cuda > mps > cpu), or exactly what was asked for, if it is there."""
from __future__ import annotations

import torch

from demos.lab.schema import ConfigError


def resolve(spec: str) -> tuple[torch.device, str]:
    """The torch.device for `spec` and a line saying why; ConfigError if it is not available."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda"), f"auto: chose cuda ({torch.cuda.get_device_name(0)})"
        if mps_available():
            return torch.device("mps"), "auto: chose mps (no CUDA)"
        return torch.device("cpu"), "auto: chose cpu (no CUDA or MPS available)"
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"CUDA is not available on this machine "
                              f"(torch {torch.__version__}); use --device cpu or auto")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(f"there are {count} CUDA device(s), "
                              f"numbered 0..{count - 1}")
        return device, f"{spec} ({torch.cuda.get_device_name(device.index or 0)})"
    if device.type == "mps" and not mps_available():
        raise ConfigError("MPS is not available on this machine; "
                          "use --device cpu or auto")
    return device, spec


def mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def check_device(device: torch.device) -> torch.device:
    """Where float64 checks run: the run's device, but CPU for MPS (it has no float64)."""
    return torch.device("cpu") if device.type == "mps" else device
