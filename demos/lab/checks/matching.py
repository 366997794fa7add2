"""How the support matrix's rows compare: a Function at one input against a base (itself at
other inputs, under a transform, or its reference), values and the gradients of its outputs
weighted by fixed random numbers, each call on copies of its own; a difference is a Mismatch.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable, Mapping, Sequence

import torch

from demos.lab.checks.gradients import masked
from demos.lab.core.tolerance import FLOAT32_TOL, FLOAT64_TOL
from demos.lab.tensors import abs_error, agree, dense, output_tensors

# a Function that computes in float32: every row judges it at float32's tolerance (matrix's)
IN_FLOAT32: ContextVar[bool] = ContextVar("in_float32", default=False)


class Mismatch(Exception):
    """A value or gradient that differs from what it should be."""


def needing(xs: Mapping[str, torch.Tensor]) -> list[str]:
    return [k for k, v in xs.items() if v.requires_grad]


def weights(outs: Sequence[torch.Tensor], seed: int = 2) -> list[torch.Tensor]:
    """Fixed random weights for each output: the scalar the gradients are taken of (with
    another seed, fixed random tangents for the inputs)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.complex128 if o.is_complex()
                        else torch.float64).to(o.device, o.dtype) for o in outs]


def scalar(fn: Callable, ws: Sequence[torch.Tensor]) -> Callable[..., torch.Tensor]:
    """x -> sum_i Re(w_i * out_i).sum(): one real number whose gradient is the weighted
    backward (a complex output's real and imaginary parts each weighted; a sparse one's dense
    values)."""
    def f(*args):
        return sum((dense(o) * w.to(o.device, o.dtype)).real.sum()
                   for o, w in zip(output_tensors(fn(*args)), ws))
    return f


def must_agree(what: str, got: Any, want: Any, rtol: float | None = None,
               atol: float | None = None) -> None:
    """Raise Mismatch unless `got` and `want` (tensors or tuples of them) agree (by default
    within FLOAT64_TOL; FLOAT32_TOL for a Function that computes in float32)."""
    rtol, atol = (rtol, atol) if rtol is not None else \
        FLOAT32_TOL if IN_FLOAT32.get() else FLOAT64_TOL
    got, want = output_tensors(got), output_tensors(want)
    if len(got) != len(want):
        raise Mismatch(f"{what}: {len(got)} tensors, expected {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        label = what if len(got) == 1 else f"{what} {i}"
        if a.shape != b.shape:
            raise Mismatch(f"{label}: shape {tuple(a.shape)}, expected {tuple(b.shape)}")
        if not agree(a, b, rtol, atol, equal_nan=True):
            raise Mismatch(f"{label} differs: max abs err {abs_error(a, b).max().item():.3g}")


def matches(what: str, fn: Callable, xs: Mapping[str, torch.Tensor], base: Callable,
            base_xs: Mapping[str, torch.Tensor], rtol: float | None = None,
            atol: float | None = None, value: bool = True) -> str:
    """Raise Mismatch unless `fn` at `xs` gives `base`'s value at `base_xs` (with `value`) and
    its gradients, of the outputs weighted by fixed random numbers ('<what> grad of <input>'
    names one that differs). Each call gets copies of its own (see grads_of). Returns what it
    held to the other: values and gradients, or values where no input needs a gradient."""
    ws = weights(output_tensors(base(*base_xs.values())))
    if value:
        must_agree(f"{what} value", fn(*map(same_layout, xs.values())),
                   base(*map(same_layout, base_xs.values())), rtol, atol)
    for k, a, b in zip(needing(xs), grads_of(scalar(fn, ws), xs),
                       grads_of(scalar(base, ws), base_xs)):
        must_agree(f"{what} grad of {k}".lstrip(), a, b, rtol, atol)
    return "values and gradients" if needing(xs) else "values"


def same_layout(v: torch.Tensor) -> torch.Tensor:
    """A copy of `v` with its strides, gaps included (clone() would close the gaps), requiring
    grad where `v` does; a sparse one, cloned."""
    out = v.detach().clone() if v.layout != torch.strided else torch.empty_strided(
        v.size(), v.stride(), dtype=v.dtype, device=v.device).copy_(v.detach())
    return out.requires_grad_(v.requires_grad)


def grads_of(f: Callable, xs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """d f(*xs) / d x for each input that requires grad, by backward."""
    copies = {k: same_layout(v) for k, v in xs.items()}
    wrt = [copies[k] for k in needing(xs)]
    if not wrt:  # no input requires grad: no gradient to compare (the values alone)
        return ()
    return tuple(map(masked, torch.autograd.grad(f(*copies.values()), wrt, allow_unused=True),
                     wrt))  # a sparse input's at its specified elements (masked)
