"""Where a run's numbers came from: the kernels torch chose, the CPU, the libraries, the threads
(what a match means, and what moves where they differ: demos/docs/reproducible.md), and the
thread policy (`threads: auto`). `take()` needs torch (imported when called); reading and
contrasting fingerprints is torch-free.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import platform
import re
from typing import Any, Mapping

# environment variables that choose kernels or thread counts inside torch and its libraries
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_CBWR",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# what a fingerprint holds, in the order a message names them
KEYS = ("device", "capability", "threads", "env", "cpu", "mkl", "onednn", "torch")


def cpu_model() -> str:
    """The CPU's vendor and model name, as the OS reports them."""
    info = cpuinfo()
    name = " ".join(filter(None, [info.get("vendor_id"), info.get("model name")]))
    return name or platform.processor() or platform.machine() or "unknown"


def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), \
            open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in itertools.takewhile(str.strip, f):  # up to the first blank line
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out


def cpu_flags() -> set[str]:
    """The CPU's feature flags (avx2, avx512f, ...) on Linux; empty elsewhere."""
    return set(cpuinfo().get("flags", "").split())


def take(device: Any) -> dict[str, Any]:
    """This process's fingerprint for a run on `device` (a torch.device), after its thread
    count is set."""
    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", shown)
    onednn = re.search(r"MKL-DNN v(\S+)", shown)
    where = str(device)
    if getattr(device, "type", None) == "cuda":
        where += f" ({torch.cuda.get_device_name(device)})"
    return {"device": where, "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
            "cpu": cpu_model(), "mkl": mkl[1] if mkl else None,
            "onednn": onednn[1] if onednn else None, "torch": str(torch.__version__)}


def differences(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """The keys whose values differ; every key when either fingerprint is unknown."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return list(KEYS)
    return [k for k in KEYS if old.get(k) != new.get(k)]


def describe(fp: Mapping[str, Any] | None, keys: tuple[str, ...] | list[str] = KEYS) -> str:
    """'AVX2, 1 thread' for the `keys` of a fingerprint; 'no fingerprint recorded' for none."""
    if not isinstance(fp, Mapping):
        return "no fingerprint recorded"
    parts = []
    for k in keys:
        v = fp.get(k)
        if k == "threads":
            parts.append(f"{v} thread{'' if v == 1 else 's'}")
        elif k == "env":
            parts.append(" ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, Mapping)
                         and v else "no kernel variables set")
        elif k in ("mkl", "onednn", "torch"):
            parts.append(f"{ {'mkl': 'MKL', 'onednn': 'oneDNN', 'torch': 'torch'}[k]} {v}")
        else:
            parts.append(str(v))
    return ", ".join(parts)


def contrast(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str:
    """'baseline: AVX2, 1 thread; this run: AVX512, 8 threads': what differs; '' if nothing."""
    keys = differences(old, new)  # every key where either is unknown
    return f"baseline: {describe(old, keys)}; this run: {describe(new, keys)}" if keys else ""


# -- the thread policy: how many CPU threads torch gets when a config says `threads: auto` --

def auto_threads(cores: int) -> int:
    """`threads: auto`: 1 on up to 2 cores (two threads wait on each other as soon as anything
    else wants a core), else half the cores, at most 8 (the scenarios' tensors are small)."""
    return 1 if cores <= 2 else min(8, cores // 2)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
