"""Checks of gradients and results; each returns a `Check` (name, passed, detail), never raises.

- `gradcheck`: torch.autograd.gradcheck of a custom Function in float64.
- `parity`: a custom Function's value and gradients against plain-torch autograd of the same
  formula.
- `expect`: final params/metrics against the targets of the config.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from demos.lab.checks.diagnose import Diagnosis, against_reference, failed_check, index
from demos.lab.core.results import Check
from demos.lab.core.scenario import Expect
from demos.lab.core.signals import Stopped, StopRequest
from demos.lab.core.text import message, one_line
from demos.lab.tensors import abs_error, agree, fresh
from demos.lab.tensors import outputs as tensors


def check(name: str, passed: bool, detail: str) -> Check:
    """A named yes/no fact with its detail (e.g. 'x.grad is None')."""
    return Check(name, bool(passed), detail)


def close(name: str, actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-6,
          atol: float = 1e-8) -> Check:
    """`actual` equals `expected` (same shape, within rtol and atol), e.g. 'w.grad equals x'."""
    if actual is None:
        return Check(name, False, "got None")
    if actual.shape != expected.shape:
        return Check(name, False, f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    err = abs_error(actual, expected).max().item()
    return Check(name, agree(actual, expected, rtol, atol),
                 f"max abs err {err:.3g} (rtol {rtol:g}, atol {atol:g})")


MAX_JACOBIAN = 10**7  # entries of n_in x (n_in + n_out): gradcheck's dense float64 matrices
                      # (80 MB per 1e7) grow with the inputs squared, and it runs two forward
                      # passes per input element


def too_big(fn: Callable, xs: Mapping[str, torch.Tensor], what: str) -> str | None:
    """Why a Jacobian check of fn at xs would exhaust memory or time, or None if it would not."""
    n_in = sum(x.numel() for x in xs.values() if x.requires_grad)
    try:
        with torch.no_grad():
            n_out = sum(o.numel() for o in tensors(fn(*fresh(xs, dtype=None).values())))
    except Exception:
        return None  # the check itself reports the failing forward
    # memory: the dense Jacobians, n_in x (n_in + n_out) float64 entries; time: one forward
    # per input element and one backward per output element, each over all n_in + n_out
    cost = max(n_in, n_out) * (n_in + n_out)
    if cost > MAX_JACOBIAN:
        return (f"not run: {n_in:,} input and {n_out:,} output elements make {what} cost "
                f"max(n_in, n_out) x (n_in + n_out) = {cost:,}, more than {MAX_JACOBIAN:,} "
                f"(its dense float64 Jacobians, and a forward per input element and a backward "
                f"per output element); use smaller inputs")
    return None


def gradcheck(name: str, fn: Callable[..., torch.Tensor], inputs: Mapping[str, torch.Tensor],
              device: torch.device, stop: StopRequest | None = None, **kwargs) -> Check:
    """torch.autograd.gradcheck of `fn(*inputs.values())` in float64 (analytic vs numerical).
    `stop`: the run's stop request (ctx.stop), for a check long enough to want Ctrl-C."""
    wrt = ", ".join(k for k, v in inputs.items() if v.requires_grad)
    opts = "".join(f", {k}={v}" for k, v in kwargs.items())
    return jacobian_check(name, torch.autograd.gradcheck, fn, inputs, device, stop,
                          failed_check,  # a wrong backward: why
                          f"analytic == numerical Jacobian w.r.t. {wrt} (float64{opts})",
                          **kwargs)


def jacobian_check(name: str, check: Callable, fn: Callable, inputs: Mapping[str, torch.Tensor],
                   device: torch.device, stop: StopRequest | None,
                   why: Callable[[Exception, Callable, Mapping], Diagnosis | None],
                   passed: str, **kwargs: Any) -> Check:
    """`check` (torch.autograd.gradcheck or gradgradcheck) of `fn` at float64 copies of
    `inputs`, as a Check with detail `passed`, or with `why(error, fn, inputs)` (a Diagnosis)
    where it finds a mismatch; ended by `stop`."""
    def call(*args: Any, **kwargs: Any) -> Any:
        # `fn`, raising Stopped at its next call once `stop` was requested (Ctrl-C): the check
        # calls it thousands of times
        if stop is not None and stop.requested:
            raise Stopped(f"stopped by {stop.requested}")
        return fn(*args, **kwargs)

    xs = fresh(inputs, device)
    problem = too_big(call, xs, check.__name__)
    if problem:
        return Check(name, False, problem)
    try:
        check(call, tuple(xs.values()), raise_exception=True, **kwargs)
    except Exception as e:  # GradcheckError, or the Function itself failing
        found = why(e, call, fresh(inputs, device)) if isinstance(e, GradcheckError) else None
        return Check(name, False, gradcheck_failure(e, [k for k, v in xs.items()
                                                        if v.requires_grad]),
                     found and found.to_json())
    return Check(name, True, passed)


def gradcheck_failure(e: BaseException, wrt: list[str]) -> str:
    """gradcheck's error as one line naming the input (its Jacobians, after 'numerical:', and
    its note on nondeterministic ops cut)."""
    text = one_line(e).split("numerical:")[0].split(" NOTE: ")[0].rstrip(" ,")
    # gradcheck numbers the inputs that require grad; say which one that is
    return re.sub(r"input (\d+)", lambda m: f"input {m[1]} ({wrt[int(m[1])]})"
                  if int(m[1]) < len(wrt) else m[0], text)


def parity(name: str, custom: Callable[..., torch.Tensor],
           reference: Callable[..., torch.Tensor], inputs: Mapping[str, torch.Tensor],
           device: torch.device, rtol: float = 1e-7, atol: float = 1e-9) -> Check:
    """Value and every input's gradient of `custom(*inputs.values())` against `reference`.

    Both get the same float64 copies of `inputs` and are back-propagated with the same
    random output gradient, so a wrong backward shows as a gradient mismatch.
    """
    return compare_to_reference(name, custom, reference, inputs, device, rtol, atol)[0]


def compare_to_reference(name: str, custom: Callable, reference: Callable,
                         inputs: Mapping[str, torch.Tensor], device: torch.device,
                         rtol: float = 1e-7,
                         atol: float = 1e-9) -> tuple[Check, dict[str, float]]:
    """parity's check, and the worst absolute and relative errors it found."""
    a, b = fresh(inputs, device), fresh(inputs, device)
    try:
        out_a, out_b = tensors(custom(*a.values())), tensors(reference(*b.values()))
        if len(out_a) != len(out_b):
            return Check(name, False, f"custom gives {len(out_a)} outputs, reference "
                                      f"{len(out_b)}"), {}
        gs = output_grads(out_b)
        for outs in (out_a, out_b):  # through the outputs that carry a gradient (an argmax's
            #                          indices, marked non-differentiable, do not)
            live = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
            if live:
                torch.autograd.backward([o for o, _ in live], [g for _, g in live])
    except Exception as e:
        return Check(name, False, one_line(e)), {}
    pairs = [(f"value{'' if len(out_a) == 1 else f' {i}'}", x, y)
             for i, (x, y) in enumerate(zip(out_a, out_b))]
    pairs += [(f"grad {k}", a[k].grad, b[k].grad) for k in a if a[k].requires_grad]
    worst_what, worst_abs = "value", 0.0
    # the scale errors are relative to: the largest magnitude among the reference's values and
    # gradients, not element by element, where a value near zero makes any rounding look large
    scale = max((y.detach().abs().max().item() for _, _, y in pairs
                 if y is not None and y.numel()), default=0.0)
    for what, x, y in pairs:
        if x is None or y is None or x.shape != y.shape:
            got = "None" if x is None else tuple(x.shape)
            return Check(name, False, f"{what}: custom gives {got}, reference "
                                      f"{'None' if y is None else tuple(y.shape)}"), {}
        diff = abs_error(x, y)
        abs_err = diff.max().item() if diff.numel() else 0.0
        rel_err = abs_err / max(scale, 1e-300)  # the worst is the worst abs_err's
        if not agree(x, y, rtol, atol):
            why = None
            if what.startswith("grad"):  # the values agree: the backward is what differs
                why = against_reference(custom, reference, fresh(inputs, device))
            flat = int(diff.argmax())
            rel_there = (diff.flatten()[flat] / y.detach().flatten()[flat].abs().clamp_min(1e-300)
                         ).item()  # at the worst absolute error: the place the detail names
            # two relative errors, each said with its measure: the element's own (what the
            # mistake looks like there) and the metric's, against the largest reference value
            return Check(name, False, f"{what} differs: max abs err {abs_err:.3g}, rel "
                                      f"{rel_there:.3g} at {index(flat, tuple(y.shape))} "
                                      f"(custom {x.flatten()[flat].item():.8g}, reference "
                                      f"{y.flatten()[flat].item():.8g}); {rel_err:.3g} of the "
                                      f"largest reference value (max_rel_error)",
                         why and why.to_json()), \
                {"max_abs_error": abs_err, "max_rel_error": rel_err}
        if abs_err >= worst_abs:
            worst_what, worst_abs = what, abs_err
    worst_rel = worst_abs / max(scale, 1e-300)
    return Check(name, True, f"value and grads of {', '.join(k for k in a if a[k].requires_grad)} "
                             f"match (float64; worst: {worst_what}, abs {worst_abs:.2g}; "
                             f"rel {worst_rel:.2g} of the largest reference value)"), \
        {"max_abs_error": worst_abs, "max_rel_error": worst_rel}


def output_grads(outs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """A fixed random gradient for each output (random, so a wrong formula cannot hide)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device)
            if o.is_floating_point() or o.is_complex() else torch.zeros_like(o)  # int, bool:
            for o in outs]                                            # no gradient flows


class Fixed(NamedTuple):
    """An argument of apply that the checks do not differentiate: not a tensor (a dim, an index
    tuple, None), or a tensor that is not floating-point (indices, a mask)."""
    name: str
    value: Any


def floating(arguments: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[int, Fixed]]:
    """apply's arguments split: the floating-point tensors, by name (what the checks
    differentiate, requiring grad as given), and the others by their position."""
    inputs = {name: value for name, value in arguments.items()
              if isinstance(value, torch.Tensor) and value.is_floating_point()}
    return inputs, {i: Fixed(name, value) for i, (name, value) in enumerate(arguments.items())
                    if name not in inputs}


def with_fixed(fn: Callable, fixed: Mapping[int, Fixed], copies: bool = False) -> Callable:
    """`fn` as a function of the floating-point tensors alone: the fixed arguments put back at
    their positions, as given (a tensor among them on the device of the first tensor given),
    and of its outputs the tensors alone (one, or a tuple). `copies`: see `in_graph`."""
    def call(*xs: Any) -> Any:
        device = next((x.device for x in xs if isinstance(x, torch.Tensor)), None)
        result = fn(*arguments(in_graph(xs, copies), fixed, device))
        if not isinstance(result, tuple) or all(isinstance(r, torch.Tensor) for r in result):
            return result
        outs = tensors(result)
        return outs[0] if len(outs) == 1 else outs
    call.__name__ = getattr(fn, "__name__", "apply")
    call.__wrapped__, call.fixed = fn, dict(fixed)  # type: ignore[attr-defined]  # repro.py
    return call


def in_graph(xs: Sequence[Any], copies: bool) -> list[Any]:
    """`xs`; with `copies`, each tensor that requires grad as a copy in the graph (x.clone()),
    for a Function that changes its input in place (mark_dirty), which autograd refuses on a
    leaf; as torch's own tests apply one."""
    return [x.clone() if copies and isinstance(x, torch.Tensor) and x.requires_grad else x
            for x in xs]


def changes_a_leaf(apply: Callable, inputs: Mapping[str, torch.Tensor],
                   fixed: Mapping[int, Fixed], device: torch.device) -> bool:
    """Whether `apply` (a Function's, or a custom op), on leaves that require grad, changes one
    in place (a mark_dirty Function): autograd refuses it there."""
    try:
        apply(*arguments(list(fresh(inputs, device).values()), fixed, device))
    except RuntimeError as e:
        return "leaf Variable that requires grad" in message(e) and "in-place" in message(e)
    except Exception:
        return False  # the checks say what is wrong
    return False


def arguments(xs: list, fixed: Mapping[int, Fixed], device: torch.device | None) -> list:
    """apply's arguments: `xs` with the fixed ones at their positions (a tensor among them on
    `device`)."""
    given = iter(xs)
    return [next(given) if i not in fixed else
            fixed[i].value.to(device) if isinstance(fixed[i].value, torch.Tensor)
            and device is not None else fixed[i].value for i in range(len(xs) + len(fixed))]


def expect(targets: Expect, params: Mapping[str, float], metrics: Mapping[str, float],
           skip: str | None = None) -> list[Check]:
    """One check per target; a name the scenario did not produce fails.

    With `skip` (why: '--dry-run', 'training diverged'), targets are reported, not evaluated;
    in a dry run a name the scenario did not produce still fails.
    """
    out = []
    for kind, values in (("params", params), ("metrics", metrics)):
        for key, target in getattr(targets, kind).items():
            name = f"expect {kind}.{key}"
            if skip in ("training diverged", "an interrupted run"):
                out.append(Check(name, None, f"not evaluated: {skip}"))
            elif skip and skip != "--dry-run" and key in values:  # other settings: exploring
                _, detail = target.meets(values[key])
                out.append(Check(name, None, f"not evaluated: {skip} (got {detail})"))
            elif key not in values:
                out.append(Check(name, False, f"the scenario produced no {kind[:-1]} '{key}' "
                                              f"(it has: {', '.join(values) or 'none'})"))
            else:
                passed, detail = target.meets(values[key])
                out.append(Check(name, None, f"not evaluated in {skip} ({detail})") if skip
                           else Check(name, passed, detail))
    return out

