"""Tensors as the checks and the instruments take them: one fresh copy, one comparison, a
function's outputs, one description. One of each, so that every check copies, compares and says
them the same way."""
from __future__ import annotations

import contextlib
import math
from typing import Any, Mapping

import torch

SMALL = 16  # values are written out up to this many elements; above, min/max/mean/norm


def fresh(tensors: Mapping[str, torch.Tensor], device: torch.device | None = None,
          dtype: torch.dtype | None = torch.float64) -> dict[str, torch.Tensor]:
    """Copies of `tensors` in float64 (or `dtype`; None: each its own) on `device` (None: where
    each is), leaves that require grad where the originals do, each in storage of its own: what
    a check does to them (a Function that changes its input in place) reaches neither the
    caller's tensors nor the next check's."""
    return {k: v.detach().to(device=device, dtype=dtype, copy=True).requires_grad_(
        v.requires_grad) for k, v in tensors.items()}


def isclose(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
            equal_nan: bool = False) -> torch.Tensor:
    """torch.isclose(actual, expected), as torch.testing judges, in the two tensors' common
    dtype on actual's device, sparse ones as dense; of the same shapes, else a ValueError."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    actual, expected = dense(actual), dense(expected)
    dtype = torch.promote_types(actual.dtype, expected.dtype)
    return torch.isclose(actual.detach().to(dtype), expected.detach().to(actual.device, dtype),
                         rtol=rtol, atol=atol, equal_nan=equal_nan)


def agree(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
          equal_nan: bool = False) -> bool:
    """Whether `actual` is `expected`: the same shape, and `isclose` everywhere."""
    return actual.shape == expected.shape and bool(
        isclose(actual, expected, rtol, atol, equal_nan).all())


def same(got: torch.Tensor | None, expected: torch.Tensor | None, rtol: float, atol: float,
         equal_nan: bool = False) -> bool:
    """Whether gradient `got` is `expected`, as autograd would take it (`aligned`: None as
    zero, a broadcast summed), then `agree`: the comparison of every gradient the checks and
    the grader make."""
    if got is None and expected is None:
        return True
    return agree(*aligned(got, expected), rtol, atol, equal_nan)


def aligned(got: torch.Tensor | None,
            expected: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(got, expected), None as zeros, got summed to expected's shape where it is a shape that
    broadcasts to it (as autograd sums a gradient); left as it is where it is not."""
    expected = expected if expected is not None else torch.zeros_like(got)
    got = got if got is not None else torch.zeros_like(expected)
    if got.shape != expected.shape:
        with contextlib.suppress(RuntimeError):
            got = got.sum_to_size(expected.shape)
    return got, expected


def abs_error(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual - expected|, element by element, in float64 (of the same shapes; sparse ones as
    dense, complex ones by the modulus)."""
    dtype = torch.promote_types(torch.promote_types(actual.dtype, expected.dtype), torch.float64)
    return (dense(actual).to(dtype) - dense(expected).to(actual.device, dtype)).detach().abs(
        ).double()


def dense(t: torch.Tensor) -> torch.Tensor:
    """`t`, a sparse one (COO, CSR, ...) as a dense tensor."""
    return t if t.layout == torch.strided else t.to_dense()


def output_tensors(result: Any) -> tuple[torch.Tensor, ...]:
    """A function's output(s) as a tuple of tensors (what is not a tensor left out)."""
    result = result if isinstance(result, tuple) else (result,)
    return tuple(r for r in result if isinstance(r, torch.Tensor))


def describe(t: torch.Tensor | None) -> dict[str, Any] | None:
    """shape, dtype, and the values when small, otherwise min/max/mean/norm (a sparse one's
    as dense; a complex one's of the modulus)."""
    if t is None:
        return None
    t = dense(t.detach())
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
    if t.numel() <= SMALL:
        out["values"] = [number(v) for v in t.cpu().reshape(-1).tolist()]
    else:
        x = (t.abs() if t.is_complex() else t).double()
        out.update(min=number(x.min().item()), max=number(x.max().item()),
                   mean=number(x.mean().item()), norm=number(x.norm().item()))
    return out


def number(v: Any) -> Any:
    """A value as strict JSON takes it: NaN and the infinities as the strings "nan", "inf",
    "-inf", a complex number as "(1+2j)" (backward.json stays readable by any JSON reader)."""
    return str(v) if isinstance(v, complex) or isinstance(v, float) and not math.isfinite(v) \
        else v


def in_brief(t: torch.Tensor | None) -> str:
    """A gradient in a few characters: 4, [1, 2, 3], or (256, 5) in [-1.2, 3.4], norm 5.6."""
    if t is None:
        return "None"
    d = describe(t)
    if "values" in d:
        v = [f"{x:.6g}" if isinstance(x, float) else str(x) for x in d["values"]]
        return v[0] if not d["shape"] and v else "[" + ", ".join(v) + "]"
    return (f"{tuple(d['shape'])} in [{gfmt(d['min'])}, {gfmt(d['max'])}], "
            f"norm {gfmt(d['norm'])}")


def gfmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)
