"""Checks of gradients and results (gradcheck, parity, expect: checks.md); each returns a
`Check` (name, passed, detail), never raises."""
from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Mapping, NamedTuple, Sequence
from unittest import mock

import torch
from torch.autograd.gradcheck import GradcheckError

from demos.lab.checks import diagnose
from demos.lab.checks.diagnose import Diagnosis, against_reference, failed_check, index
from demos.lab.core.results import Check
from demos.lab.core.scenario import Expect
from demos.lab.core.signals import Stopped, StopRequest
from demos.lab.core.text import message, one_line
from demos.lab.core.tolerance import FLOAT32_TOL, FLOAT64_TOL, REFERENCE_TOL
from demos.lab.tensors import abs_error, agree, dense, fresh, output_tensors


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


MAX_JACOBIAN = 10**7  # a Jacobian check's cost bound: the full check builds dense float64
#                       Jacobians, n_in x (n_in + n_out) (80 MB per 1e7), with a forward per
#                       input element; fast mode makes about FAST_PASSES passes over n_in + n_out
FAST_PASSES = 10
GRADCHECK32 = {"eps": 1e-3, "rtol": 1e-2, "atol": 1e-3}  # a Function that computes in float32
COMPUTES_IN_FLOAT32 = "the Function computes in float32"  # the check that says so (structure)


class NotRun(Exception):
    """A Jacobian check not run, never failed; args: a support row's status and why."""


def torch_check(check: Callable, fn: Callable, xs: Mapping[str, torch.Tensor],
                float32: bool = False, **kwargs: Any) -> list[str]:
    """`check` (gradcheck or gradgradcheck) of fn at xs as a careful user runs it (fast mode,
    then the full check on `restricted` blocks; sparse tensors; float32: checks.md, "At the
    edges"); returns how, each a phrase of the check's detail."""
    with torch.no_grad():
        outs = output_tensors(fn(*fresh(xs, dtype=None).values()))
    n_in, n_out = sum(x.numel() for x in xs.values() if x.requires_grad), sum(
        o.numel() for o in outs)
    if check is torch.autograd.gradgradcheck:  # it checks the backward: of x and grad_output
        n_in, n_out = n_in + n_out, n_in
    cost, how, sparse = max(n_in, n_out) * (n_in + n_out), [], [
        k for k, x in xs.items() if x.layout != torch.strided]
    if FAST_PASSES * (n_in + n_out) > MAX_JACOBIAN:
        raise NotRun("skipped", f"not run: {n_in:,} input and {n_out:,} output elements, more "
                     f"than even {check.__name__}'s fast mode can afford ({FAST_PASSES} passes "
                     f"over them, past {MAX_JACOBIAN:,}); use smaller inputs")
    # fast mode's tolerance grows with the sizes (a gradient 3/2 times too big on 69 % of a
    # [64, 128] input passes it: issue 51): the full check on elements spread over each tensor
    block = restricted(fn, xs) if cost > MAX_JACOBIAN and not sparse and all(
        o.layout == torch.strided for o in outs) else None
    if cost > MAX_JACOBIAN:
        kwargs["fast_mode"] = True
        how.append(f"fast mode: {n_in:,} input and {n_out:,} output elements make the full "
                   f"check's dense Jacobians cost {cost:,}, past {MAX_JACOBIAN:,}; it compares "
                   f"random projections of them" + (f", then the full check runs on "
                                                    f"{', '.join(block.names)} (pairs of "
                                                    f"neighbouring indices spread over each "
                                                    f"dim)" if block else ""))
    if sparse:
        kwargs.update(masked=True, check_undefined_grad=False)
        how.append(f"masked: {', '.join(sparse)} sparse, the gradients of its unspecified "
                   f"elements not compared")
    if any(o.layout != torch.strided for o in outs):
        fn = partial(lambda f, *a: tuple(map(dense, output_tensors(f(*a)))), fn)
        how.append("the sparse output made dense (to_dense()), as torch's gradcheck asks")
    if float32:
        kwargs.update(GRADCHECK32)
        how.append("float32's step and tolerance: " + ", ".join(
            f"{k} {v:g}" for k, v in GRADCHECK32.items()))
    try:
        with mock.patch.object(sys.modules["torch.autograd.gradcheck"],
                               "_run_slow_mode_and_get_error", lambda *args: ""):
            check(fn, tuple(xs.values()), raise_exception=True, **kwargs)
        if block:
            check(block.fn, tuple(block.xs.values()), raise_exception=True,
                  **{**kwargs, "fast_mode": False})
    except ValueError as e:  # "Sparse output is not supported at gradcheck yet. ..."
        if "not supported at gradcheck" not in message(e):
            raise
        raise NotRun("unsupported", f"not run: torch's {check.__name__} refuses it: "
                                    f"{one_line(e)}") from None
    return how


def gradcheck(name: str, fn: Callable[..., torch.Tensor], inputs: Mapping[str, torch.Tensor],
              device: torch.device, stop: StopRequest | None = None, float32: bool = False,
              **kwargs) -> Check:
    """torch.autograd.gradcheck of `fn(*inputs.values())` in float64 (analytic vs numerical),
    as torch_check runs it. `stop`: the run's stop request (ctx.stop), for a check long enough
    to want Ctrl-C; `float32`: the Function computes in float32."""
    wrt = ", ".join(k for k, v in inputs.items() if v.requires_grad)
    opts = "".join(f", {k}={v}" for k, v in kwargs.items())
    return jacobian_check(name, torch.autograd.gradcheck, fn, inputs, device, stop,
                          # a wrong backward: why (a float32 one's at float32's step, tolerance)
                          lambda e, f, xs: failed_check(e, f, xs) if not float32 else
                          None if "forward AD" in message(e) else diagnose.against_numbers(
                              f, xs, GRADCHECK32["eps"],
                              (GRADCHECK32["rtol"], GRADCHECK32["atol"])),
                          f"analytic == numerical Jacobian w.r.t. {wrt} (float64{opts})",
                          float32, **kwargs)


def jacobian_check(name: str, check: Callable, fn: Callable, inputs: Mapping[str, torch.Tensor],
                   device: torch.device, stop: StopRequest | None,
                   why: Callable[[Exception, Callable, Mapping], Diagnosis | None],
                   passed: str, float32: bool = False, **kwargs: Any) -> Check:
    """`check` (torch.autograd.gradcheck or gradgradcheck) of `fn` at float64 copies of
    `inputs` by torch_check, as a Check with detail `passed` (and how), or with `why(error, fn,
    inputs)` (a Diagnosis, see `diagnosed`) where it finds a mismatch; ended by `stop`."""
    def call(*args: Any, **kwargs: Any) -> Any:
        # `fn`, raising Stopped at its next call once `stop` was requested (Ctrl-C): the check
        # calls it thousands of times
        if stop is not None and stop.requested:
            raise Stopped(f"stopped by {stop.requested}")
        return fn(*args, **kwargs)

    xs = fresh(inputs, device)
    try:
        how = torch_check(check, call, xs, float32, **kwargs)
    except NotRun as e:
        return Check(name, None, e.args[1])
    except Exception as e:  # GradcheckError, or the Function itself failing
        found = diagnosed(partial(why, e), call, fresh(inputs, device)) \
            if isinstance(e, GradcheckError) else None
        return Check(name, False, gradcheck_failure(e, [k for k, v in xs.items()
                                                        if v.requires_grad]),
                     found)
    return Check(name, True, "; ".join([passed, *how]))


def diagnosed(why: Callable[[Callable, Mapping], Diagnosis | None], fn: Callable,
              xs: Mapping[str, torch.Tensor]) -> Diagnosis | None:
    """why(fn, xs); past what finite differences can afford, why of fn restricted to elements
    spread over each tensor (`restricted`), said in its `says`. Where that finds a mistake in
    some places alone (a region, a few elements), the contiguous tile that starts, or ends,
    at its worst element says what the mistake is there, if it can (rows 20 and after 3/2
    times too big: issue 51, item 9)."""
    spread = restricted(fn, xs)
    if spread is None:
        return why(fn, xs)
    found = spread.why(why)
    if found is None or found.kind not in REGIONAL or not found.elements:
        return found
    worst, of = found.elements[0].at, spread.shapes.get(tensor(found.input))
    for side in (0, 1):  # the tile from the worst element on, then the one up to it
        tile = of and restricted(fn, xs, (worst, of, side))
        there = tile and tile.why(why)
        if there and there.kind not in REGIONAL:
            return there
    return found


REGIONAL = ("some elements", "no simple pattern", "not finite", "right one not finite")
# kinds a mistake in one region of a big tensor may show on elements spread over it


class Block(NamedTuple):
    """fn restricted to some elements of each input that requires grad and of each output:
    `fn`, a function of those elements (`xs`), their `names` (x[16 of 64, 32 of 128], the
    output[48:64, 96:128]), and by name each tensor's indices in each dim and its shape."""
    fn: Callable
    xs: dict[str, torch.Tensor]
    names: list[str]
    at: dict[str, tuple[list[int], ...]]
    shapes: dict[str, tuple[int, ...]]

    def why(self, why: Callable[[Callable, Mapping], Diagnosis | None]) -> Diagnosis | None:
        """why of the block, said as the whole tensor's: its elements at their indices there,
        and the block named."""
        found = why(self.fn, self.xs)
        if found is None:
            return None
        at = self.at.get(tensor(found.input), ())

        def place(i: Sequence[int]) -> list[int]:  # an index in the block, in the tensor
            return [ix[j] for ix, j in zip(at, i)] if at else list(i)
        says = found.says
        if found.kind in REGIONAL:  # the positions `diagnose.at` names, (0, 25), (7,)
            says = re.sub(r"\((\d+(?:, \d+)*),?\)", lambda m: str(tuple(place(
                [int(j) for j in m[1].split(", ")]))), says)
        return replace(found, says=f"{says} (found on {', '.join(self.names)}: the elements "
                                   f"finite differences can afford)",
                       elements=[replace(e, at=place(e.at)) for e in found.elements])


def tensor(probed: str) -> str:
    """The tensor whose elements a diagnosis names: the probed gradient's, an input's (x) or,
    in the double backward, grad_output's, which is its output's (grad_output 1: output 1)."""
    return re.sub(r"^grad_output ?(\d*)$", lambda m: f"output {m[1]}" if m[1] else "the output",
                  probed)


def restricted(fn: Callable, xs: Mapping[str, torch.Tensor],
               near: tuple[list[int], tuple[int, ...], int] | None = None) -> Block | None:
    """None where finite differences can afford every input element (MAX_NUMERICAL, and two
    forwards each within MAX_JACOBIAN); else fn restricted to as many elements of each input
    that requires grad and of each output as they can afford: in each dim, pairs of
    neighbouring indices spread from the first to the last (`spread`), so that a mistake in
    any region shows; or, `near` (an index, the shape it indexes, 0: from it on, 1: up to
    it), the contiguous tile there, in each tensor at the same fraction of its dims."""
    wrt = [k for k, x in xs.items() if x.requires_grad]
    with torch.no_grad():
        outs = output_tensors(fn(*xs.values()))
    most = min(diagnose.MAX_NUMERICAL,
               MAX_JACOBIAN // max(sum(t.numel() for t in (*xs.values(), *outs)), 1))
    if sum(xs[k].numel() for k in wrt) <= most:
        return None
    each = max(most // len(wrt), 1)
    named = dict(zip(diagnose.output_names(len(outs)), outs))
    at = {k: indices(t.shape, each, near) for k, t in (*((k, xs[k]) for k in wrt),
                                                       *named.items())}
    index = {k: grid(ix, outs[0].device if outs else None) for k, ix in at.items()}
    blocks = {k: x[index[k]].detach().requires_grad_() if k in wrt else x
              for k, x in xs.items()}

    def sub(*parts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = [x.detach().clone() for x in xs.values()]
        for a, p, k in zip(args, parts, xs):
            a[index[k] if k in wrt else ...] = p  # the block put in its input
        return tuple(o[index[n]] for o, n in zip(output_tensors(fn(*args)), named))

    return Block(sub, blocks, [k + said(at[k], xs[k].shape) for k in wrt] + [
        n + said(at[n], o.shape) for n, o in named.items()], at,
        {k: tuple(t.shape) for k, t in (*xs.items(), *named.items())})


def indices(shape: torch.Size, most: int, near: tuple[list[int], tuple[int, ...], int] | None
            ) -> tuple[list[int], ...]:
    """At most `most` elements of a tensor of `shape`, in each dim the indices of `spread`, or
    of the tile `near` a place (see restricted); a dim's count the same for either, its
    longest dimension halved till they fit."""
    size = list(shape)
    while math.prod(size) > most:
        size[size.index(max(size))] = (max(size) + 1) // 2
    if near is None:
        return tuple(spread(n, k) for n, k in zip(shape, size))
    # the place's dims matched from the last, as broadcasting matches them (a dim it lacks:
    # from 0), at the same fraction of each dim's length
    where, of, side = near
    fraction = [0.0] * len(shape) + [i / n for i, n in zip(where, of)]
    tile = []
    for f, n, k in zip(fraction[len(fraction) - len(shape):], shape, size):
        start = min(max(int(f * n) - side * (k - 1), 0), n - k)
        tile.append(list(range(start, start + k)))
    return tuple(tile)


def spread(n: int, k: int) -> list[int]:
    """k of range(n): pairs of neighbours spread evenly from the first index to the last, so
    that a mistake in any region, or at every other index, falls on some (too few for pairs:
    single indices, the first and the last among them)."""
    if k >= n:
        return list(range(n))
    if k < 4:
        return sorted({round(j * (n - 1) / max(k - 1, 1)) for j in range(k)})
    pairs = k // 2
    return sorted({round(j * (n - 2) / (pairs - 1)) + i for j in range(pairs) for i in (0, 1)})


def grid(at: tuple[list[int], ...], device: torch.device | None) -> tuple[torch.Tensor, ...]:
    """An index of the elements at `at` (each dim's indices): their product, as np.ix_."""
    return tuple(torch.tensor(ix, dtype=torch.long, device=device).view(
        [-1 if d == i else 1 for d in range(len(at))]) for i, ix in enumerate(at))


def said(at: tuple[list[int], ...], shape: torch.Size) -> str:
    """The elements at `at` as a reader indexes them: [:16, 96:128] where contiguous, else
    [16 of 64, ...]."""
    def one(ix: list[int], n: int) -> str:
        if ix and ix == list(range(ix[0], ix[-1] + 1)):
            return ":" if len(ix) == n else f"{ix[0] or ''}:{ix[-1] + 1}"
        return f"{len(ix):,} of {n:,}"
    return f"[{', '.join(one(ix, n) for ix, n in zip(at, shape))}]" if at else ""


def gradcheck_failure(e: BaseException, wrt: list[str]) -> str:
    """gradcheck's error as one line naming the input (its Jacobians, after 'numerical:', and
    its note on nondeterministic ops cut)."""
    text = one_line(e).split("numerical:")[0].split(" NOTE: ")[0].rstrip(" ,")
    # gradcheck numbers the inputs that require grad; say which one that is
    return re.sub(r"input (\d+)", lambda m: f"input {m[1]} ({wrt[int(m[1])]})"
                  if int(m[1]) < len(wrt) else m[0], text)


def parity(name: str, custom: Callable[..., torch.Tensor],
           reference: Callable[..., torch.Tensor], inputs: Mapping[str, torch.Tensor],
           device: torch.device, rtol: float = FLOAT64_TOL[0],
           atol: float = FLOAT64_TOL[1]) -> Check:
    """Value and every input's gradient of `custom(*inputs.values())` against `reference`, both
    on the same float64 copies of `inputs`, back-propagated with the same random gradient."""
    return compare_to_reference(name, custom, reference, inputs, device, rtol, atol)[0]


def compare_to_reference(name: str, custom: Callable, reference: Callable,
                         inputs: Mapping[str, torch.Tensor], device: torch.device,
                         rtol: float = FLOAT64_TOL[0],
                         atol: float = FLOAT64_TOL[1]) -> tuple[Check, dict[str, float]]:
    """parity's check, and the worst absolute and relative errors it found."""
    a, b = fresh(inputs, device), fresh(inputs, device)
    try:
        out_a, out_b = output_tensors(custom(*a.values())), output_tensors(reference(*b.values()))
        if len(out_a) != len(out_b):
            return Check(name, False, f"custom gives {len(out_a)} outputs, reference "
                                      f"{len(out_b)}"), {}
        gs = output_grads(out_b)
        for outs in (out_a, out_b):  # through the outputs that carry a gradient (an argmax's
            #                          indices, marked non-differentiable, do not)
            live = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
            if live:  # each backward a grad_output of its own: one that changes it in place
                #       (g *= 2) would hand the other a changed one (issue 51, item 10)
                torch.autograd.backward([o for o, _ in live], [g.clone() for _, g in live])
    except Exception as e:
        return Check(name, False, one_line(e)), {}
    pairs = [(f"value{'' if len(out_a) == 1 else f' {i}'}", dense(x), dense(y))
             for i, (x, y) in enumerate(zip(out_a, out_b))]
    pairs += [(f"grad {k}", masked(a[k].grad, a[k]), masked(b[k].grad, a[k]))
              for k in a if a[k].requires_grad]
    worst_what, worst_abs = "value", 0.0
    # the scale errors are relative to: the largest magnitude among the reference's values and
    # gradients, not element by element, where a value near zero makes any rounding look large
    scale = max((y.detach().abs().max().item() for _, _, y in pairs
                 if y is not None and y.numel()), default=0.0)
    def why(what: str) -> Diagnosis | None:
        # a gradient that differs where the values agree: the backward's mistake (a float32
        # Function's at float32's tolerance); a None where one is needed is `zero`
        return against_reference(custom, reference, fresh(inputs, device), FLOAT32_TOL
                                 if rtol >= FLOAT32_TOL[0] else REFERENCE_TOL) \
            if what.startswith("grad") else None

    for what, x, y in pairs:
        if x is None or y is None or x.shape != y.shape:
            got = "None" if x is None else tuple(x.shape)
            return Check(name, False, f"{what}: custom gives {got}, reference "
                                      f"{'None' if y is None else tuple(y.shape)}",
                         why(what)), {}
        diff = abs_error(x, y)
        abs_err = diff.max().item() if diff.numel() else 0.0
        rel_err = abs_err / max(scale, 1e-300)  # the worst is the worst abs_err's
        if not agree(x, y, rtol, atol):
            # two relative errors, each said with its measure: the element's own (what the
            # mistake looks like there) and the metric's, against the largest reference value
            return Check(name, False, f"{what} differs: {worst(x, y, diff)}; {rel_err:.3g} of "
                                      f"the largest reference value (max_rel_error)",
                         why(what)), {"max_abs_error": abs_err, "max_rel_error": rel_err}
        if abs_err >= worst_abs:
            worst_what, worst_abs = what, abs_err
    worst_rel = worst_abs / max(scale, 1e-300)
    return Check(name, True, f"value and grads of {', '.join(k for k in a if a[k].requires_grad)} "
                             f"match (float64; worst: {worst_what}, abs {worst_abs:.2g}; "
                             f"rel {worst_rel:.2g} of the largest reference value)"), \
        {"max_abs_error": worst_abs, "max_rel_error": worst_rel}


def worst(x: torch.Tensor, y: torch.Tensor, diff: torch.Tensor) -> str:
    """Where custom `x` is furthest from reference `y` (diff: |x - y|), with the relative error
    there, or, where the reference is 0, that (relative to 0, any error is infinite)."""
    flat = int(diff.argmax())
    there, err = y.detach().flatten()[flat].item(), diff.flatten()[flat].item()
    at = index(flat, tuple(y.shape))
    return (f"max abs err {err:.3g}" + (f", rel {err / abs(there):.3g} at {at}" if there else
                                        f" at {at}, where the reference is 0") +
            f" (custom {x.flatten()[flat].item():.8g}, reference {there:.8g})")


def masked(grad: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """A gradient as a dense tensor; of a sparse `x`, at x's specified elements alone (as
    gradcheck's masked=True compares it)."""
    return None if grad is None else dense(grad).sparse_mask(x).to_dense() \
        if x.layout != torch.strided else dense(grad)


def output_grads(outs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """A fixed random gradient for each output (random, so a wrong formula cannot hide)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device)
            if o.is_floating_point() or o.is_complex() else torch.zeros_like(o)  # int, bool:
            for o in outs]                                            # no gradient flows


class Fixed(NamedTuple):
    """An argument of apply that the checks do not differentiate: not a tensor (a dim, an index
    tuple, None), or a tensor that is not floating-point (indices, a mask). `ties`: where it
    reaches an input tensor by itself (demos.lab.checks.ties), bound to each call's."""
    name: str
    value: Any
    ties: tuple[Any, ...] = ()


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
        outs = output_tensors(result)
        return outs[0] if len(outs) == 1 else outs
    call.__name__ = getattr(fn, "__name__", "apply")
    call.__wrapped__, call.fixed = fn, dict(fixed)  # type: ignore[attr-defined]  # repro.py
    return call


def in_graph(xs: Sequence[Any], copies: bool) -> list[Any]:
    """`xs`; with `copies`, each tensor that requires grad as a copy in the graph (x.clone()),
    for a Function that changes its input in place (mark_dirty), which autograd refuses on a
    leaf; as torch's own tests apply one. One tensor given twice is one copy given twice."""
    made: dict[int, torch.Tensor] = {}
    return [made.setdefault(id(x), x.clone()) if copies and isinstance(x, torch.Tensor)
            and x.requires_grad else x for x in xs]


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
    `device`); what a fixed one reaches of the inputs by itself (its ties) bound to this
    call's, until the next call binds its own."""
    given = iter(xs)
    args = [next(given) if i not in fixed else
            fixed[i].value.to(device) if isinstance(fixed[i].value, torch.Tensor)
            and device is not None else fixed[i].value for i in range(len(xs) + len(fixed))]
    for f in fixed.values():
        for tie in f.ties:
            tie.bind(args[tie.position])
    return args


def expect(targets: Expect, params: Mapping[str, float], metrics: Mapping[str, float],
           skip: str | None = None) -> list[Check]:
    """One check per target; a name the scenario did not produce fails (in a dry run too).
    With `skip` (why: '--dry-run', 'training diverged'), targets are reported, not evaluated."""
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

