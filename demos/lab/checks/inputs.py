"""A Function's inputs as a config gives them (`InputSpec`), checked as their dtype holds
them, and as apply gets them (`make_inputs`). Torch-free to import: a Config declares them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from demos.lab.core.schema import ConfigError, convert, did_you_mean, param
from demos.lab.core.user_code import Supplied

TENSOR_DTYPES = ("float64", "float32", "int64", "int32", "int16", "int8", "uint8", "bool")
# what an integer or bool tensor holds: (lowest, highest)
RANGES = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31 - 1), "int16": (-2**15, 2**15 - 1),
          "int8": (-128, 127), "uint8": (0, 255), "bool": (0, 1),
          "float32": (-3.4028234663852886e38, 3.4028234663852886e38)}


@dataclass
class InputSpec:
    """One argument of a custom Function's apply: a tensor, random of a shape or of a given
    value; or, with tensor: false, a Python value passed as it is (a dim, an index tuple, None)."""
    name: str | None = param(None, "its name in checks, graphs and reports (default x0, x1, ...)")
    shape: list[int] | None = param(None, "random of this shape: randn under the seed, or "
                                          "uniform in [low, high]")
    low: float | None = param(None, "with shape: uniform from low ...")
    high: float | None = param(None, "... to high (e.g. away from a kink or a pole)")
    value: Any = param(None, "the tensor's value: a number or nested lists of numbers; with "
                             "tensor: false, the Python value itself (a list is passed as a "
                             "tuple; null is None)")
    requires_grad: bool = param(True, "whether the input requires grad (a floating-point "
                                      "tensor only)")
    dtype: str = param("float64", "the tensor's dtype: " + ", ".join(TENSOR_DTYPES) + " (an "
                                  "integer or bool tensor, e.g. indices, needs a value and "
                                  "requires no grad; a floating one is checked in float64)")
    tensor: bool = param(True, "false: `value` is passed to apply as it is, not as a tensor")
    given: bool = param(False, "check_function's record of a tensor it was given: its shape "
                               "and dtype (the run uses the tensor itself); with tensor: "
                               "false, of a long or unusual value: what it is")

    def validate(self, where: str) -> None:
        if self.name is not None and not (self.name.isprintable() and 0 < len(self.name) <= 40):
            raise ConfigError(f"{where}.name: a label of 1 to 40 printable characters (no "
                              f"newline or control character), got {self.name!r}")
        if not self.tensor:
            given = [k for k in ("shape", "low", "high") if getattr(self, k) is not None]
            if given or self.dtype != "float64":
                raise ConfigError(f"{where}: tensor: false passes `value` as it is; "
                                  f"{(given or ['dtype'])[0]} is for a tensor")
            self.value = python_value(self.value)
            self.requires_grad = False
            return
        if self.dtype not in TENSOR_DTYPES:
            raise ConfigError(f"{where}.dtype: {self.dtype!r} is not a dtype an input may "
                              f"have{did_you_mean(self.dtype, TENSOR_DTYPES)}")
        if self.given:  # check_function's record: the tensor itself is used
            return
        if not self.dtype.startswith("float"):
            if self.value is None:
                raise ConfigError(f"{where}: {an(self.dtype)} tensor needs its value (indices, a "
                                  f"mask): value: [...]")
            self.requires_grad = False  # only floating-point tensors can require grad
        if (self.shape is None) == (self.value is None):
            raise ConfigError(f"{where}: give either shape (random) or value, not "
                              f"{'both' if self.shape is not None else 'neither'}")
        if self.shape is not None:
            if any(d < 1 for d in self.shape) or math.prod(self.shape) > 10**5:
                raise ConfigError(f"{where}.shape: dimensions must be >= 1 and at most 100,000 "
                                  f"elements in all (gradcheck's cost grows with them), "
                                  f"got {self.shape}")
            if (self.low is None) != (self.high is None):
                raise ConfigError(f"{where}: give both low and high, or neither")
            if self.low is not None and not self.low < self.high:
                raise ConfigError(f"{where}: low {self.low} must be below high {self.high}")
            if self.low is not None and not math.isfinite(self.high - self.low):
                raise ConfigError(f"{where}.high: [low, high] = [{self.low:g}, {self.high:g}] "
                                  f"is wider than a float64 holds (high - low overflows: every "
                                  f"input would be inf or nan); narrow it")
        else:
            if self.low is not None or self.high is not None:
                raise ConfigError(f"{where}: low/high go with shape, not with value")
            self.value = numbers(self.value, f"{where}.value")
            if math.prod(shape_of(self.value)) > 10**5:
                raise ConfigError(f"{where}.value: at most 100,000 numbers, as for shape "
                                  f"(gradcheck's cost grows with them), got "
                                  f"{math.prod(shape_of(self.value)):,}; pass check_function "
                                  f"the tensor itself")
            self.value = held(self.value, f"{where}.value", self.dtype)


def an(dtype: str) -> str:
    return ("an " if dtype.startswith("int") else "a ") + dtype


def held(value: Any, where: str, dtype: str) -> Any:
    """A tensor's numbers as its dtype holds them (ints for an integer or bool one); a
    ConfigError naming one that it cannot hold."""
    if isinstance(value, list):
        return [held(v, f"{where}[{i}]", dtype) for i, v in enumerate(value)]
    low, high = RANGES.get(dtype, (-math.inf, math.inf))
    floating = dtype.startswith("float")
    if not (floating or float(value).is_integer()) or not low <= value <= high:
        raise ConfigError(f"{where}: {value:g} in {an(dtype)} tensor; give " + (
            "0 or 1 (false, true)" if dtype == "bool" else f"numbers from {low:g} to {high:g}"
            if floating else f"whole numbers from {low} to {high}"))
    return value if floating else int(value)


def python_value(value: Any) -> Any:
    """A config's value as apply gets it: lists become tuples (an index, a size), inside too."""
    return tuple(python_value(v) for v in value) if isinstance(value, list) else value


def numbers(value: Any, where: str) -> Any:
    """A number or rectangular nested lists of finite numbers, as floats (`5e-6` included,
    which YAML reads as a string); a ConfigError naming the element otherwise."""
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where}: empty list")
        rows = [numbers(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if any(shape_of(r) != shape_of(rows[0]) for r in rows):
            raise ConfigError(f"{where}: rows of different lengths")
        return rows
    try:
        return convert(float, value, where)
    except ConfigError:
        raise ConfigError(f"{where}: must be a finite number, got {value!r}") from None


def shape_of(value: Any) -> list[int]:
    return [len(value), *shape_of(value[0])] if isinstance(value, list) else []


def make_inputs(specs: list[InputSpec], seed: int, device: Any) -> dict[str, Any]:
    """apply's arguments, by name, in order: floating-point tensors in float64 (random under
    the seed, of the given values, or copies of the tensors given to check_function), integer
    and bool tensors of their dtype, and the values that are not tensors as they are."""
    import torch

    g = torch.Generator().manual_seed(seed)
    inputs: dict[str, Any] = {}
    for i, spec in enumerate(specs):
        name, value = spec.name or f"x{i}", spec.value
        if not spec.tensor:  # a value, as it is (check_function's, itself)
            inputs[name] = value.value if isinstance(value, Supplied) else value
            continue
        dtype = getattr(torch, spec.dtype) if not spec.dtype.startswith("float") \
            else torch.float64
        if isinstance(value, Supplied):  # check_function's tensor, copied: the caller's stays
            x = value.value.detach().to(dtype=dtype, copy=True)
        elif spec.value is not None:
            x = torch.tensor(spec.value, dtype=dtype)
        elif spec.low is not None:
            x = spec.low + (spec.high - spec.low) * torch.rand(spec.shape, generator=g,
                                                               dtype=torch.float64)
        else:
            x = torch.randn(spec.shape, generator=g, dtype=torch.float64)
        inputs[name] = x.to(device).requires_grad_(spec.requires_grad and x.is_floating_point())
    return inputs
