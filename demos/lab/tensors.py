"""Tensors as the checks and the instruments take them: one fresh copy, one comparison, a
function's outputs. One of each, so that every check copies and compares the same way."""
from __future__ import annotations

from typing import Any, Mapping

import torch


def fresh(tensors: Mapping[str, torch.Tensor], device: torch.device | None = None,
          dtype: torch.dtype | None = torch.float64) -> dict[str, torch.Tensor]:
    """Copies of `tensors` in float64 (or `dtype`; None: each its own) on `device` (None: where
    each is), leaves that require grad where the originals do, each in storage of its own: what
    a check does to them (a Function that changes its input in place) reaches neither the
    caller's tensors nor the next check's."""
    return {k: v.detach().to(device=device, dtype=dtype, copy=True).requires_grad_(
        v.requires_grad) for k, v in tensors.items()}


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
          equal_nan: bool = False) -> torch.Tensor:
    """Element by element, whether `actual` is `expected`: |actual - expected| <= atol + rtol *
    |expected| (torch.isclose, as torch.testing judges), in the two tensors' common dtype, on
    actual's device. NaN is close to NaN only with `equal_nan`; the same infinity is close to
    itself; sparse tensors as their dense values. The shapes must be the same (a ValueError
    otherwise)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    actual, expected = dense(actual), dense(expected)
    dtype = torch.promote_types(actual.dtype, expected.dtype)
    return torch.isclose(actual.detach().to(dtype), expected.detach().to(actual.device, dtype),
                         rtol=rtol, atol=atol, equal_nan=equal_nan)


def agree(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
          equal_nan: bool = False) -> bool:
    """Whether `actual` is `expected`: the same shape, and `close` everywhere."""
    return actual.shape == expected.shape and bool(
        close(actual, expected, rtol, atol, equal_nan).all())


def abs_error(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual - expected|, element by element, in float64 (of the same shapes; sparse ones as
    dense, complex ones by the modulus)."""
    dtype = torch.promote_types(torch.promote_types(actual.dtype, expected.dtype), torch.float64)
    return (dense(actual).to(dtype) - dense(expected).to(actual.device, dtype)).detach().abs(
        ).double()


def dense(t: torch.Tensor) -> torch.Tensor:
    """`t`, a sparse one (COO, CSR, ...) as a dense tensor."""
    return t if t.layout == torch.strided else t.to_dense()


def outputs(result: Any) -> tuple[torch.Tensor, ...]:
    """A function's output(s) as a tuple of tensors (what is not a tensor left out)."""
    result = result if isinstance(result, tuple) else (result,)
    return tuple(r for r in result if isinstance(r, torch.Tensor))
