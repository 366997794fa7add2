"""Checks of any custom autograd Function's backward: what it returns, not only what autograd
lets through (why: checks.md, "Check your own autograd Function")."""
from __future__ import annotations

from typing import Callable, Mapping

import torch

from demos.lab.checks.diagnose import failed_check, output_names
from demos.lab.checks.gradients import (
    COMPUTES_IN_FLOAT32,
    Check,
    Fixed,
    arguments,
    in_graph,
    jacobian_check,
    output_grads,
    with_fixed,
)
from demos.lab.core.signals import StopRequest
from demos.lab.core.text import one_line
from demos.lab.tensors import agree, fresh, output_tensors

UNMARKED = "forward changes no input without ctx.mark_dirty"


def backward_structure(fn: type, inputs: Mapping[str, torch.Tensor], device: torch.device,
                       fixed: Mapping[int, Fixed] | None = None,
                       copies: bool = False) -> list[Check]:
    """The checks of what forward and backward do and return (checks.md, "Check your own
    autograd Function", from `forward runs` to `autograd accepts the backward`). `inputs`: the
    floating-point tensors; `fixed`: apply's other arguments, by position; `copies`: apply gets
    copies of the inputs that require grad (see in_graph)."""
    fixed = fixed or {}
    xs = fresh(inputs, device)
    before = fresh(xs, dtype=None)  # their values, to see what forward changes
    args = arguments(in_graph(list(xs.values()), copies), fixed, device)
    given = iter(xs)  # apply's arguments in order: the inputs' names, the fixed ones' names
    names = [fixed[i].name if i in fixed else next(given) for i in range(len(args))]
    op = not isinstance(fn, type)  # a torch.library.custom_op, called as it is
    call = fn if op else fn.apply
    try:
        result = call(*args)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # asyncio.CancelledError and the like: the Function's too
        return [Check("forward runs", False, one_line(e))]
    outs = output_tensors(result)
    if not outs:
        return [Check("forward runs", False, f"it returned {type(result).__name__}, no tensor")]
    node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
    # an op declares what it changes (mutates_args), and opcheck holds it to that
    unmarked = [] if op else [unmarked_changes(xs, before, outs)]
    if node is None:
        return [Check("forward runs", True, f"{len(outs)} output(s)"), *unmarked,
                Check("the output is in the graph", False,
                      "no output has a grad_fn: does any input require grad?")]
    found = [Check("forward runs", True, f"{len(outs)} output(s): " + ", ".join(
        f"{tuple(o.shape)} {str(o.dtype).removeprefix('torch.')}" for o in outs) + (
        "; applied to copies of the inputs that require grad (x.clone()): it changes its "
        "input in place (mark_dirty), which autograd refuses on a leaf" if copies else "")),
        *unmarked]
    if op:  # its backward is autograd's to call (register_autograd): autograd runs it
        return found + [accepted(call, inputs, fixed, device, copies)]
    gs = output_grads(outs)
    unchanged = [g.clone() for g in gs]
    by_output = iter(gs)  # backward gets one grad per output; None for one that is no tensor
    try:
        returned = fn.backward(node, *[next(by_output) if isinstance(r, torch.Tensor) else None
                                       for r in (result if isinstance(result, tuple)
                                                 else (result,))])
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        return found + [Check("backward runs", False, one_line(e))]
    returned = returned if isinstance(returned, tuple) else (returned,)
    extra = returned[len(names):]
    counted = len(returned) == len(names) or (
        len(returned) > len(names) and all(g is None for g in extra))
    found.append(Check("backward returns one grad per input", counted,
                       f"returned {len(returned)} for {len(names)} inputs ({', '.join(names)})"
                       + (f"; the {len(extra)} after them None, which autograd ignores"
                          if counted and extra else "")))
    problems, notes = [], []
    for i, (name, x, grad) in enumerate(zip(names, args, returned)):
        if not isinstance(x, torch.Tensor):
            if grad is not None:
                problems.append(f"{name}: returned a grad for an argument that is not a tensor "
                                f"(autograd refuses it; return None)")
            continue
        if not x.requires_grad:
            if grad is not None:  # autograd drops it unread, whatever its shape (issue 51)
                notes.append(f"{name}: a grad returned, though {name} requires none (autograd "
                             f"ignores it; returning None where not ctx.needs_input_grad[{i}] "
                             f"saves computing it)")
        elif grad is None:
            problems.append(f"{name}: returned None, but {name} requires grad")
        elif not isinstance(grad, torch.Tensor):
            problems.append(f"{name}: returned a {type(grad).__name__}, not a tensor")
        elif grad.shape != x.shape and not broadcasts(x.shape, grad.shape):
            problems.append(f"{name}: grad has shape {tuple(grad.shape)}, {name} has "
                            f"{tuple(x.shape)} (autograd sums a grad of a shape {name} "
                            f"broadcasts to, no other)")
        elif grad.shape != x.shape:
            notes.append(f"{name}: grad of shape {tuple(grad.shape)}, which autograd sums to "
                         f"{name}'s {tuple(x.shape)}")
        elif grad.dtype != x.dtype and (grad.dtype, x.dtype) != (torch.float32, torch.float64):
            problems.append(f"{name}: grad is {str(grad.dtype).removeprefix('torch.')}, {name} is "
                            f"{str(x.dtype).removeprefix('torch.')} ({dtype_fate(grad, x)})")
    found.append(Check("each grad matches its input (None, shape, dtype)", not problems,
                       "; ".join(problems) or "; ".join(
                           ["shapes and dtypes match; None exactly where an input needs no "
                            "grad", *notes])))
    low = [n for n, o in zip(output_names(len(outs)), outs) if o.dtype == torch.float32] + [
        f"{n}'s gradient" for n, x, g in zip(names, args, returned)
        if getattr(g, "dtype", 0) == torch.float32 != getattr(x, "dtype", torch.float32)]
    if low:  # said once; every check judges it at float32's tolerance
        found.append(Check(COMPUTES_IN_FLOAT32, True, f"with float64 inputs, {' and '.join(low)} "
                                          f"{'are' if low[1:] else 'is'} float32: each check "
                                          f"judges it at float32's tolerance"))
    changed = [i for i, (g, c) in enumerate(zip(gs, unchanged)) if not torch.equal(g, c)]
    found.append(Check("backward leaves grad_output unchanged", not changed,
                       f"backward modified grad_output {changed} in place; clone it first"
                       if changed else "grad_output unchanged"))
    return found + [accepted(call, inputs, fixed, device, copies)]


def dtype_fate(grad: torch.Tensor, x: torch.Tensor) -> str:
    """What autograd does with a gradient of another dtype than its input's: it casts it,
    silently, except a complex one for a real input, which it refuses (its check in
    validate_outputs, quoted)."""
    if grad.is_complex() and not x.is_complex():
        return (f"autograd refuses it: RuntimeError: {COMPLEX_FOR_REAL}; a real input's "
                f"gradient is the real part of the complex one: return its .real, as torch's "
                f"own ops do")
    return "autograd casts it silently"


COMPLEX_FOR_REAL = ("Expected isFloatingType(grad.scalar_type()) || (input_is_complex == "
                    "grad_is_complex) to be true, but got false.")  # torch 2.13's words


def unmarked_changes(xs: Mapping[str, torch.Tensor], before: Mapping[str, torch.Tensor],
                     outs: tuple[torch.Tensor, ...]) -> Check:
    """UNMARKED: each input whose values forward changed is an output itself, as a tensor
    marked dirty (ctx.mark_dirty) is returned; else autograd does not know of the change."""
    changed = [k for k, x in xs.items() if not agree(x, before[k], 0, 0, equal_nan=True)
               and not any(o is x for o in outs)]
    if not changed:
        return Check(UNMARKED, True, "no input changed in place, or only inputs marked dirty")
    them = ", ".join(changed)
    return Check(UNMARKED, False, f"{them} changed in place without ctx.mark_dirty: autograd "
                                  f"does not know, and whatever uses {them} next (the caller's "
                                  f"next step, another check) sees the changed values; mark "
                                  f"it dirty and return it, or compute out of place (each "
                                  f"check here applies the Function to fresh copies)")


def accepted(call: Callable, inputs: Mapping[str, torch.Tensor], fixed: Mapping[int, Fixed],
             device: torch.device, copies: bool) -> Check:
    """'autograd accepts the backward': a real backward from the outputs that carry a
    gradient, on fresh inputs."""
    xs = fresh(inputs, device)
    try:
        again = [o for o in output_tensors(with_fixed(call, fixed, copies)(*xs.values()))
                 if o.requires_grad]
        torch.autograd.backward(again, output_grads(tuple(again)))
        return Check("autograd accepts the backward", True, "loss.backward() ran")
    except Exception as e:
        return Check("autograd accepts the backward", False, one_line(e))


def broadcasts(shape: torch.Size, to: torch.Size) -> bool:
    """Whether a tensor of `shape` broadcasts to `to` (autograd then sums a grad of shape `to`
    back to `shape`)."""
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def gradgradcheck(name: str, fn, inputs: Mapping[str, torch.Tensor], device: torch.device,
                  stop: StopRequest | None = None, float32: bool = False) -> Check:
    """torch.autograd.gradgradcheck in float64: the backward's own gradients are right.
    `stop` and `float32` as gradcheck takes them (a float32 Function's failure: no diagnosis,
    which would be its rounding's)."""
    return jacobian_check(name, torch.autograd.gradgradcheck, fn, inputs, device, stop,
                          lambda e, f, xs: None if float32 else
                          failed_check(e, f, xs, second=True),
                          "second derivatives match numerical ones (float64)", float32)
