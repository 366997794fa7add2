"""Why a gradient is wrong: where (which output, which input, which elements) and what kind of
mistake, from a catalogue checked against the numbers (how: checks.md, "Why it is wrong")."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable, Mapping

import torch
import torch.autograd.forward_ad as fwAD

from demos.lab.core.files import strict
from demos.lab.core.results import Check, Diagnosis, Element
from demos.lab.core.text import message
from demos.lab.core.tolerance import NUMERICAL_TOL, REFERENCE_TOL
from demos.lab.tensors import abs_error, aligned, fresh, isclose, output_tensors, same


def index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element `flat` of a tensor of `shape`."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))


MOST_ELEMENTS = 5  # rows of the table of differing elements
MAX_NUMERICAL = 4096  # input elements: past this, no finite differences (two forwards each)


Pull = Callable[[str, torch.Tensor], Mapping[str, torch.Tensor | None]]


@dataclass
class Maps:
    """The two linear maps to compare at one point, the one under test (`got`) and the right
    one (`expected`): each takes a probe in one of the `spaces` (name -> its value at the
    point) and gives a tensor per name of `results` (None where nothing flows). Reverse mode:
    the spaces are the outputs (a probe is a grad_output), the results the inputs' gradients.
    Forward mode (`forward`): the spaces are the inputs (a probe is a tangent), the results
    the outputs' tangents (J·v)."""
    got: Pull
    expected: Pull
    spaces: Mapping[str, torch.Tensor]
    results: Mapping[str, torch.Tensor]
    # the right map at other inputs (`point`, the inputs here, transformed); None: not tried
    at: Callable[[Mapping[str, torch.Tensor]], Pull | None]
    point: Mapping[str, torch.Tensor]
    forward: bool = False
    tolerance: tuple[float, float] = NUMERICAL_TOL  # (rtol, atol): as the check that failed
    #                                             compares (a reference's: REFERENCE_TOL)

    def it(self, r: str) -> str:
        return f"the tangent of {r}" if self.forward else f"{r}'s gradient"

    @property
    def incoming(self) -> str:
        return "the input's tangent" if self.forward else "grad_output"


def diagnose(m: Maps) -> Diagnosis | None:
    """The diagnosis of the first (space, result) pair whose maps differ; None when none does
    (nothing to explain)."""
    g = torch.Generator().manual_seed(7)
    for space, value in m.spaces.items():
        if not value.is_floating_point():
            continue
        probes = [torch.randn(value.shape, generator=g, dtype=torch.float64) for _ in range(2)]
        got = [m.got(space, v) for v in probes]
        want = [m.expected(space, v) for v in probes]
        for name in m.results:
            if all(same(a.get(name), b.get(name), *m.tolerance) for a, b in zip(got, want)):
                continue
            if all(b.get(name) is None for b in want):
                continue  # nothing is expected to flow there
            return Pair(m, space, name, probes, got, want).diagnosis()
    return None


@dataclass
class Pair:
    """One probe space and one result whose maps differ, under two random probes."""
    m: Maps
    space: str
    name: str
    probes: list[torch.Tensor]
    all_got: list[Mapping[str, torch.Tensor | None]]
    all_expected: list[Mapping[str, torch.Tensor | None]]
    tried: list[str] = field(default_factory=list)  # the kinds this shape allowed, in order

    def diagnosis(self) -> Diagnosis:
        kind, says = self.kind()
        g, e = self.pair(0)
        output, input = (self.name, self.space) if self.m.forward else (self.space, self.name)
        return Diagnosis(kind, says, output, input, elements(g, e),
                         "tangent" if self.m.forward else "grad_output")

    def pair(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(got, expected) under probe i, as `aligned` gives them."""
        return aligned(self.all_got[i].get(self.name), self.all_expected[i].get(self.name))

    def kind(self) -> tuple[str, str]:
        m, x, it, tried = self.m, self.name, self.m.it(self.name), self.tried
        (g1, e1), (g2, e2) = self.pair(0), self.pair(1)
        if g1.shape != e1.shape:
            return "shape", (f"{it} has shape {tuple(g1.shape)}, which autograd cannot sum "
                             f"to {tuple(e1.shape)}")
        bad = (~g1.isfinite() & e1.isfinite()) | (~g2.isfinite() & e2.isfinite())
        if bad.any():
            nan = bool((g1.isnan() | g2.isnan())[bad].any())
            inf = bool((g1.isinf() | g2.isinf())[bad].any())
            what = "NaN or inf" if nan and inf else "NaN" if nan else "inf"
            return "not finite", (f"{it} is {what} at {at(bad)} where the right one is "
                                  f"finite: a 0/0, a log or sqrt of a negative, inf - inf or "
                                  f"0 * inf there (torch.where computes both branches: keep "
                                  f"the input of the one not taken in its domain)")
        lost = (g1.isfinite() & ~e1.isfinite()) | (g2.isfinite() & ~e2.isfinite())
        if lost.any():
            return "right one not finite", (
                f"the right {'tangent' if m.forward else 'gradient'} is NaN or inf at "
                f"{at(lost)} where {it} is finite: the forward overflows or leaves its domain "
                f"near these inputs, and the numbers it is compared with mean nothing there; "
                f"choose inputs (low, high) where the outputs are finite")
        if not any(t.abs().max().item() > 0 for t in (g1, g2) if t.numel()):
            if len(m.spaces) > 1 and self.others_fine():
                return "one contribution missing", (
                    f"{self.space}'s tangent never reaches {x}: the jvp leaves out that "
                    f"input's term" if m.forward else
                    f"{self.space}'s gradient never reaches {x}: the backward leaves out that "
                    f"output's contribution; add its term, from its grad_output")
            none = self.all_got[0].get(x) is None
            return "zero", (f"{it} is {'None' if none else 'zero'} where one is needed: "
                            f"return the derivative times {m.incoming} for {x}")
        if same(g1, g2, *m.tolerance) and not same(e1, e2, *m.tolerance):
            return "not multiplied", (f"{it} does not change with {m.incoming}: it is the "
                                      f"local derivative, not multiplied by {m.incoming}")
        tried += ["a factor", "a sign"]
        c = factor(g1, e1)
        if c is not None and same(g2, c * e2, *m.tolerance):
            return self.factor_kind(c)
        for other in m.results:
            theirs = [w.get(other) for w in self.all_expected]
            mine = [w.get(other) for w in self.all_got]  # and the other got this one's
            if other == x or m.results[other].shape != m.results[x].shape:
                continue
            tried.append(f"a swap with {other}")
            if all(t is not None and t.shape == g.shape and same(g, t, *m.tolerance)
                   for g, t in zip((g1, g2), theirs)) and \
                    all(same(o, e, *m.tolerance) for o, e in zip(mine, (e1, e2))):
                what, per = ("tangents", "output") if m.forward else \
                    ("gradients", "input of forward")
                return "swapped", (f"{it} is {other}'s: the {what} of {x} and {other} come in "
                                   f"the wrong order (one per {per}, in order)")
        if e1.dim() >= 2 and e1.shape[-1] == e1.shape[-2]:
            tried.append("a transpose")
            if same(g1, e1.mT, *m.tolerance) and same(g2, e2.mT, *m.tolerance):
                return "transposed", (f"{it} is the right one transposed (its last two "
                                      f"dimensions): a .t() or .transpose(-1, -2) (or a "
                                      f"matmul's operands) the wrong way round")
        out = m.spaces[self.space]
        if not m.forward and out.dim() >= 2 and out.shape[-1] == out.shape[-2]:
            tried.append("grad_output transposed")
            if all(same(g, m.expected(self.space, v.mT.contiguous()).get(x), *m.tolerance)
                   for g, v in zip((g1, g2), self.probes)):
                return "transposed", (f"{it} is the right one for grad_output transposed (its "
                                      f"last two dimensions): grad_output, or a sum of it, "
                                      f"taken the wrong way round (.t(), .sum(0) for .sum(1))")
        sliced = "" if m.forward else self.broadcast_slice(g1, g2)
        if sliced:
            return "broadcast sum", (f"{it} takes {m.incoming}'s first slice along the "
                                     f"dimension(s) {x} is broadcast over ({sliced}) instead of "
                                     f"summing over them: {m.incoming}.sum({sliced})")
        local = self.elementwise(g1, g2, e1, e2)
        if local:
            return local
        wrong = ~(isclose(g1, e1, *m.tolerance) & isclose(g2, e2, *m.tolerance))
        n, k = wrong.numel(), int(wrong.sum())
        tried.append("a few elements")
        if 0 < k <= n // 3:
            return "some elements", (f"{it} is wrong only at {at(wrong)}: a kink or a branch "
                                     f"(where, clamp, abs, max) takes the wrong side there")
        moved = self.transformed(g1, g2)
        if moved:
            return moved
        return "no simple pattern", (f"{it} differs with no simple pattern (tried: "
                                     f"{', '.join(tried)}): compare the formula with the "
                                     f"forward's derivative")

    def transformed(self, g1: torch.Tensor, g2: torch.Tensor) -> tuple[str, str] | None:
        """Whether got is the right map at the inputs transformed (`transforms`): the right
        formula at the wrong point."""
        m = self.m
        moved = list(transforms(m.point, m.results if m.forward else m.spaces))
        self.tried += [f"the right one at {', '.join(t[0] for t in moved)}"] if moved else []
        for _, says, ys in moved:
            with contextlib.suppress(Exception):  # the forward may refuse that point
                right = m.at(ys)  # type: ignore[misc]
                if right and all(same(g, right(self.space, v).get(self.name), *m.tolerance)
                                 for g, v in zip((g1, g2), self.probes)):
                    return "transformed input", f"{m.it(self.name)} is the right one {says}"
        return None

    def factor_kind(self, c: float) -> tuple[str, str]:
        it = self.m.it(self.name)
        if abs(c + 1) < 1e-6:
            return "sign", f"{it} has the wrong sign: a minus too many or too few"
        mean = ""
        if not self.m.forward:
            out = self.m.spaces[self.space]
            k = math.prod(out.shape[d] for d in broadcast_dims(self.m.results[self.name].shape,
                                                               out.shape))
            if k > 1 and abs(c * k - 1) < 1e-6:  # the numbers cannot tell these two apart
                mean = (f" (1/{k}: or it averages grad_output over the {k} elements "
                        f"{self.name} is broadcast over, where it should sum them)")
        return "factor", (f"{it} is {ratio(c)} times the right one: a constant factor is off; "
                          f"multiply it by {ratio(1 / c)}{mean}")

    def others_fine(self) -> bool:
        """Whether this result is right from every other space (so this space's contribution
        alone is missing)."""
        g = torch.Generator().manual_seed(11)
        for space, value in self.m.spaces.items():
            if space == self.space or not value.is_floating_point():
                continue
            v = torch.randn(value.shape, generator=g, dtype=torch.float64)
            if not same(self.m.got(space, v).get(self.name),
                        self.m.expected(space, v).get(self.name), *self.m.tolerance):
                return False
        return True

    def broadcast_slice(self, g1: torch.Tensor, g2: torch.Tensor) -> str:
        """The output's dimensions the input is broadcast over, where its gradient is the right
        one for grad_output's first slice along them alone; '' otherwise."""
        x, out = self.m.results[self.name], self.m.spaces[self.space]
        dims = broadcast_dims(x.shape, out.shape)
        if not dims:
            return ""
        self.tried.append("a broadcast slice")
        for g, v in zip((g1, g2), self.probes):
            first = torch.zeros_like(v)
            keep = tuple(slice(0, 1) if d in dims else slice(None) for d in range(v.dim()))
            first[keep] = v[keep]
            if not same(g, self.m.expected(self.space, first).get(self.name),
                        *self.m.tolerance):
                return ""
        return ", ".join(map(str, dims))

    def elementwise(self, g1, g2, e1, e2) -> tuple[str, str] | None:
        """Where the output has the input's shape and each gradient is the incoming one times a
        local derivative: the input used where the derivative is the output (exp), or a
        condition inverted. (The output for the input is a `transformed` input.)"""
        s, r = self.m.spaces[self.space], self.m.results[self.name]
        # x the input's value, y the output's (the spaces are the inputs in forward mode)
        x, y = (t.detach().double() for t in ((s, r) if self.m.forward else (r, s)))
        (v1, v2), tol = self.probes, self.m.tolerance
        if x.shape != y.shape or (v1.abs() < 1e-3).any() or (v2.abs() < 1e-3).any():
            return None
        self.tried += ["the input for the output", "an inverted condition"]
        d_got, d_want = g1 / v1, e1 / v1
        if not (same(g2 / v2, d_got, *tol) and same(e2 / v2, d_want, *tol)):
            return None  # not elementwise
        it, c = self.m.it(self.name), factor(d_want, y)
        if c is not None and same(d_want, c * y, *tol) and same(d_got, c * x, *tol):
            return "input for output", (f"{it} multiplies {self.m.incoming} by the input where "
                                        f"the derivative needs the output (for exp(x), the "
                                        f"derivative is the output: save it for backward)")
        binary = ((d_want.abs() < 1e-6) | ((d_want - 1).abs() < 1e-6)).all()
        if binary and same(d_got, 1 - d_want, *tol):
            return "inverted condition", (f"{it} flows where it should be blocked and is "
                                          f"blocked where it should flow: the condition is "
                                          f"inverted (> where <= is meant)")
        return None


def at(mask: torch.Tensor) -> str:
    """Where `mask` holds, as a sentence says it: '2 of 8 elements ((0,), (7,))'."""
    k, shape = int(mask.sum()), tuple(mask.shape)
    first = ", ".join(str(index(int(i), shape)) for i in mask.flatten().nonzero().flatten()[:3])
    return f"{k} of {mask.numel()} elements ({first}{', ...' if k > 3 else ''})"


def transforms(xs: Mapping[str, torch.Tensor], outs: Mapping[str, torch.Tensor]):
    """The inputs `xs` as a formula mixes them up: (what, what it says when it holds, the
    inputs) for one negated, transposed over its last two dims, two swapped, an output for it."""
    def moved(**new: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: new.get(k, x).detach().to(x.dtype).contiguous().requires_grad_(
            x.requires_grad) for k, x in xs.items()}

    for i, (k, x) in enumerate(xs.items()):
        yield f"-{k}", (f"at -{k}: {k} stands where -{k} is meant, or the other way round "
                        f"(sigmoid(-x) for sigmoid(x))"), moved(**{k: -x})
        if x.dim() >= 2 and x.shape[-1] == x.shape[-2]:
            yield f"{k} transposed", (f"with {k} transposed: {k} stands where {k}.transpose(-1, "
                                      f"-2) is meant, or the other way round (a @ g for "
                                      f"a.transpose(-1, -2) @ g)"), moved(**{k: x.mT})
        yield from ((f"{k} and {j} swapped", f"with {k} and {j} swapped: the formula uses each "
                     f"where the other is meant", moved(**{k: y, j: x}))
                    for j, y in list(xs.items())[i + 1:] if y.shape == x.shape)
        yield from ((f"{o} for {k}", f"at {o} in place of {k}: the formula uses {o} where {k} is "
                     f"meant (save {k} for backward)", moved(**{k: y}))
                    for o, y in outs.items() if y.shape == x.shape)


def elements(got: torch.Tensor, expected: torch.Tensor) -> list[Element]:
    """The elements where got and expected differ most; a NaN or inf first."""
    if got.shape != expected.shape:
        return []
    diff = abs_error(got, expected).flatten().nan_to_num(nan=math.inf)
    worst = diff.argsort(descending=True)[:MOST_ELEMENTS]
    return [Element(list(index(int(i), tuple(expected.shape))),
                    strict(expected.flatten()[i].item()), strict(got.flatten()[i].item()))
            for i in worst if diff[i] > 0]


def factor(got: torch.Tensor, expected: torch.Tensor) -> float | None:
    """The c with got = c * expected, by least squares; None where expected is zero."""
    den = (expected * expected).sum().item()
    if den == 0:
        return None
    c = (got * expected).sum().item() / den
    return c if math.isfinite(c) and c != 0 else None


def ratio(c: float) -> str:
    """A factor as people say it: 2, 1/2, 2/3, -3, or 0.7071."""
    f = Fraction(c).limit_denominator(12)
    if abs(float(f) - c) < 1e-6 * max(1.0, abs(c)):
        return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"
    return f"{c:.4g}"


def broadcast_dims(small: torch.Size, big: torch.Size) -> tuple[int, ...]:
    """The dimensions of `big` that a tensor of shape `small` is broadcast over."""
    lead = len(big) - len(small)
    if lead < 0:
        return ()
    return tuple(d for d in range(len(big))
                 if d < lead or (small[d - lead] == 1 and big[d] != 1))


# -- the maps: a Function's own, finite differences of its forward, a reference's autograd --


def real_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    """A function's output tensors, a complex one as its real and imaginary parts (the last
    dim of torch.view_as_real): the diagnosis compares real numbers, as gradcheck does."""
    return tuple(torch.view_as_real(t) if t.is_complex() else t for t in output_tensors(result))


def output_names(n: int) -> list[str]:
    return ["the output"] if n == 1 else [f"output {i}" for i in range(n)]


def point(fn: Callable, xs: Mapping[str, torch.Tensor],
          differentiable: bool = False) -> dict[str, torch.Tensor]:
    """fn's outputs at xs (float64, detached), by name; `differentiable`: those a gradient
    flows back through alone (not an index marked non-differentiable, not an integer)."""
    with torch.set_grad_enabled(differentiable):
        outs = real_outputs(fn(*fresh(xs).values()))
    return {name: t.detach() for name, t in zip(output_names(len(outs)), outs)
            if not differentiable or (t.requires_grad and t.is_floating_point())}


def pullback(fn: Callable, xs: Mapping[str, torch.Tensor]) -> Pull:
    """fn's autograd (its backward) at xs: a grad_output for one output -> a gradient per
    input that requires grad."""
    def pull(space: str, v: torch.Tensor) -> dict[str, torch.Tensor | None]:
        leaves = fresh(xs)
        with torch.enable_grad():
            outs = real_outputs(fn(*leaves.values()))
            out = outs[output_names(len(outs)).index(space)]
            wrt = [k for k, x in leaves.items() if x.requires_grad]
            if not out.requires_grad or not wrt:
                return {k: None for k in wrt}
            # a copy of the probe: a backward that changes grad_output in place (g *= 2)
            # must not change the probe the right map is then given (issue 51, item 10)
            grads = torch.autograd.grad(out, [leaves[k] for k in wrt], v.to(out, copy=True),
                                        allow_unused=True)
        return {k: None if g is None else g.detach().double() for k, g in zip(wrt, grads)}
    return pull


def numerical(fn: Callable, xs: Mapping[str, torch.Tensor], eps: float = 1e-6) -> Pull | None:
    """The vector-Jacobian product by central differences of fn's forward (float64): the
    Jacobian's columns, `directional` along each input element; None past MAX_NUMERICAL input
    elements."""
    wrt = [k for k, x in xs.items() if x.requires_grad]
    if sum(xs[k].numel() for k in wrt) > MAX_NUMERICAL:
        return None
    push = directional(fn, xs, eps)
    columns = {k: [push(k, torch.nn.functional.one_hot(torch.tensor(i), xs[k].numel()).double(
        ).view(xs[k].shape)) for i in range(xs[k].numel())] for k in wrt}

    def pull(space: str, v: torch.Tensor) -> dict[str, torch.Tensor | None]:
        return {k: torch.tensor([(col[space] * v).sum().item() for col in columns[k]],
                                dtype=torch.float64).view(xs[k].shape) for k in wrt}
    return pull


def pushforward(fn: Callable, xs: Mapping[str, torch.Tensor]) -> Pull:
    """fn's forward-mode AD (its jvp) at xs: a tangent for one input -> each output's
    tangent."""
    def push(space: str, u: torch.Tensor) -> dict[str, torch.Tensor | None]:
        with fwAD.dual_level():
            args = [fwAD.make_dual(x.detach(), u.to(x)) if k == space else x.detach()
                    for k, x in fresh(xs).items()]
            outs = real_outputs(fn(*args))
            tangents = [fwAD.unpack_dual(t).tangent for t in outs]
        return {name: None if t is None else t.detach().double()
                for name, t in zip(output_names(len(outs)), tangents)}
    return push


def directional(fn: Callable, xs: Mapping[str, torch.Tensor], eps: float = 1e-6) -> Pull:
    """J·u by central differences of fn's forward along u (float64, in no graph)."""
    def push(space: str, u: torch.Tensor) -> dict[str, torch.Tensor | None]:
        with torch.no_grad():
            plus, minus = (real_outputs(fn(*[x + h * u if k == space else x
                                             for k, x in fresh(xs).items()]))
                           for h in (eps, -eps))
            return {name: (a.double() - b.double()) / (2 * eps)
                    for name, a, b in zip(output_names(len(plus)), plus, minus)}
    return push


def against_numbers(fn: Callable, xs: Mapping[str, torch.Tensor], eps: float = 1e-6,
                    tolerance: tuple[float, float] = NUMERICAL_TOL) -> Diagnosis | None:
    """fn's backward against finite differences of its forward (step `eps`), at xs (float64
    leaves)."""
    try:
        expected = numerical(fn, xs, eps)
        if expected is None:
            return None
        wrt = {k: x for k, x in xs.items() if x.requires_grad}
        return diagnose(Maps(pullback(fn, xs), expected, point(fn, xs, True), wrt, tolerance=
                             tolerance, at=lambda ys: numerical(fn, ys, eps), point=xs))
    except Exception:  # the check's own detail says what failed; no diagnosis then
        return None


def against_reference(fn: Callable, reference: Callable, xs: Mapping[str, torch.Tensor],
                      tolerance: tuple[float, float] = REFERENCE_TOL,
                      first: str | None = None) -> Diagnosis | None:
    """fn's backward against the reference's autograd, at xs (float64 leaves); `first`: the
    input whose gradient is tried first (the first that differs is diagnosed)."""
    try:
        wrt = {k: x for k, x in sorted(xs.items(), key=lambda kx: kx[0] != first)
               if x.requires_grad}
        return diagnose(Maps(pullback(fn, xs), pullback(reference, xs), point(fn, xs, True),
                             wrt, tolerance=tolerance, at=lambda ys: pullback(reference, ys),
                             point=xs))
    except Exception:
        return None


def forward_against_numbers(fn: Callable, xs: Mapping[str, torch.Tensor]) -> Diagnosis | None:
    """fn's jvp against finite differences of its forward along the same tangents."""
    try:
        wrt = {k: x for k, x in xs.items() if x.is_floating_point()}
        return diagnose(Maps(pushforward(fn, xs), directional(fn, xs), wrt, point(fn, xs),
                             forward=True, at=lambda ys: directional(fn, ys), point=wrt))
    except Exception:
        return None


def second_against_numbers(fn: Callable, xs: Mapping[str, torch.Tensor]) -> Diagnosis | None:
    """The double backward (the backward's own backward) against finite differences of the
    backward: the diagnosis of a failed gradgradcheck. The backward is seen as a function of
    the inputs and each output's grad_output; its results, the inputs' gradients."""
    try:
        names = list(xs)
        wrt = [k for k in names if xs[k].requires_grad]
        outs = point(fn, xs)

        def backward(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with torch.enable_grad():
                given = [a if a.requires_grad else a.detach().requires_grad_(xs[k].requires_grad)
                         for k, a in zip(names, args)]
                gs = args[len(names):]
                got = real_outputs(fn(*given))
                grads = torch.autograd.grad(got, [a for k, a in zip(names, given) if k in wrt],
                                            [g.clone() for g in gs],  # its own (see pullback)
                                            create_graph=True, allow_unused=True)
            return tuple(torch.zeros_like(xs[k]) if g is None else g for k, g in zip(wrt, grads))

        extended = {**xs, **{f"grad_output{'' if len(outs) == 1 else ' ' + str(i)}":
                             torch.randn(t.shape, generator=torch.Generator().manual_seed(3),
                                         dtype=torch.float64).requires_grad_()
                             for i, t in enumerate(outs.values())}}
        d = against_numbers(backward, extended)
        if d is None:
            return None
        # said as the backward's: output i of it is input i's gradient
        of = wrt[output_names(len(wrt)).index(d.output)]
        says = f"the backward's gradient of {of} carries no gradient w.r.t. {d.input}" \
            if d.kind == "zero" else f"in the double backward, {d.says}"
        lost = graphless(fn, xs)
        if lost:  # pytorch#58509, #104040: torch says nothing of it; the cause, not the numbers'
            #       pattern (a factor there is no factor to fix)
            them = "them" if lost[1:] else "it"
            if d.kind != "zero":
                says = (f"the backward's gradient of {of} has a wrong derivative w.r.t. "
                        f"{d.input} ({d.kind})")
            says = (f"{says}: the backward computes from {' and '.join(lost)}, which "
                    f"change{'' if lost[1:] else 's'} with the inputs but carr"
                    f"{'y' if lost[1:] else 'ies'} no graph of them (forward runs with autograd "
                    f"off: a tensor it computes, kept on ctx or saved, is a constant to the "
                    f"double backward). If a second derivative is not meant to be supported, "
                    f"decorate backward with @once_differentiable (torch then refuses it: the "
                    f"double_backward row is unsupported); else save the inputs with "
                    f"ctx.save_for_backward and recompute {them} from the inputs in backward")
        elif d.kind == "zero":
            says += (": the backward detaches something it depends on (.detach(), .data, "
                     "NumPy, @once_differentiable) or is not differentiable")
        return replace(d, output=f"the backward's gradient of {of}", says=says)
    except Exception:
        return None


def graphless(fn: Callable, xs: Mapping[str, torch.Tensor]) -> list[str]:
    """The tensors the Function keeps for its backward (ctx attributes, in a tuple or list
    too, and ctx.saved_tensors) that change with the inputs but carry no graph of them:
    computed in forward, where autograd records nothing (an input or an output kept carries
    one). A second derivative through them leaves out how they change."""
    g = torch.Generator().manual_seed(5)
    nearby = {k: (x.detach() + 1e-3 * torch.randn(x.shape, generator=g, dtype=torch.float64)
                  .to(x)).requires_grad_() if x.requires_grad else x for k, x in xs.items()}
    here, there = kept(fn, xs), kept(fn, nearby)
    return [k for k, t in here.items() if (t.is_floating_point() or t.is_complex())
            and not t.requires_grad and k in there and t.shape == there[k].shape
            and not torch.equal(t, there[k])]


def kept(fn: Callable, xs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the first autograd.Function node in the graph of fn's outputs keeps for its
    backward, by the name backward reads it by (ctx.foo, ctx.pair[1], ctx.saved_tensors[0])."""
    with torch.enable_grad():
        outs = real_outputs(fn(*fresh(xs).values()))
    todo, found = [o.grad_fn for o in outs if o.grad_fn is not None], {}
    for _ in range(64):  # breadth first, a few nodes deep (fn may index, or sum, its outputs)
        if not todo:
            return {}
        node = todo.pop(0)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            break
        todo += [f for f, _ in node.next_functions if f is not None]
    else:
        return {}
    for k, v in vars(node).items():
        many = isinstance(v, (tuple, list))
        found.update({f"ctx.{k}" + (f"[{i}]" if many else ""): t
                      for i, t in enumerate(v if many else (v,)) if isinstance(t, torch.Tensor)})
    found.update({f"ctx.saved_tensors[{i}]": t for i, t in enumerate(node.saved_tensors)
                  if isinstance(t, torch.Tensor)})
    return found


def failed_check(e: BaseException, fn: Callable, xs: Mapping[str, torch.Tensor],
                 second: bool = False) -> Diagnosis | None:
    """Why gradcheck (`second`: gradgradcheck) failed with `e`: a backward that is not
    reentrant (two runs differ, which one run's numbers cannot show), or the numbers'."""
    numbers = second_against_numbers if second else against_numbers
    if "forward AD" in message(e):
        return None  # forward mode's own check says why
    if "grad is incorrect layout" in message(e):
        return wrong_layout(fn, xs)  # refused before any value is compared
    if "not reentrant" not in message(e):
        return numbers(fn, xs)
    also = numbers(fn, xs)  # torch checks reentrancy before the values: they may differ too
    return Diagnosis("not reentrant", (
        f"the {'double ' if second else ''}backward gives different values when run twice on "
        f"the same input and grad_output (gradcheck runs it twice): something random or "
        f"stateful in it (torch.rand, a counter, a buffer it changes, a nondeterministic "
        f"kernel); make it a function of its inputs, or pass gradcheck a nondet_tol" +
        (f". Besides, {also.says}" if also and also.kind != "no simple pattern" else "")),
        "the output", ", ".join(k for k, x in xs.items() if x.requires_grad),
        also.elements if also else [])


def wrong_layout(fn: Callable, xs: Mapping[str, torch.Tensor]) -> Diagnosis | None:
    """Why gradcheck said "grad is incorrect layout": the input whose gradient has another
    layout than its own (a sparse one for a dense input), which torch's gradcheck refuses
    whatever its values (issue 51, item 10)."""
    try:
        leaves = fresh(xs)
        outs = [o for o in real_outputs(fn(*leaves.values())) if o.requires_grad]
        wrt = [k for k, x in leaves.items() if x.requires_grad]
        grads = torch.autograd.grad(outs, [leaves[k] for k in wrt],
                                    [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception:
        return None

    def said(t: torch.Tensor) -> str:
        return f"{'dense' if t.layout == torch.strided else 'sparse'} ({t.layout})"

    for k, g in zip(wrt, grads):
        x = leaves[k]
        if g is not None and g.layout != x.layout:
            return Diagnosis("layout", (
                f"{k}'s gradient is {said(g)} where {k} is {said(x)}: torch's gradcheck refuses "
                f"a gradient whose layout is not its input's (\"grad is incorrect layout\"), "
                f"whatever its values; autograd's backward() takes it, and {k}.grad is then "
                f"{said(g).split()[0]} (as nn.Embedding(sparse=True) makes it), which Adam and "
                f"RMSprop refuse; return it in {k}'s layout" +
                (": grad.to_dense()" if x.layout == torch.strided else "")),
                "the output" if len(outs) == 1 else "the outputs", k)
    return None


def deliberate(gradcheck: Check) -> Check:
    """A failed gradcheck of a Function whose parity with its reference holds: the hint that a
    deliberate gradient (clipping, straight-through) needs `intended: true`; or, where gradcheck
    refused its layout alone, that its values are right."""
    d = gradcheck.diagnosis or Diagnosis("", "", "the outputs", "every input")
    if d.kind in ("not reentrant", "right one not finite"):
        return gradcheck
    if d.kind == "layout":  # its values are right: only its layout was refused
        return Check(gradcheck.name, False, gradcheck.detail, replace(d, says=(
            f"{d.says}. Its values are right: the reference's (parity holds)")))
    says = (f"{d.input}'s gradient is not the forward's derivative, but it is exactly the "
            f"reference's (parity holds): a deliberate gradient (clipping, a straight-through "
            f"estimator, a reversal layer) needs `intended: true` (check_function: "
            f"intended=True), which checks it against the reference instead of finite "
            f"differences; if it is not deliberate, the reference makes the same mistake")
    return Check(gradcheck.name, False, gradcheck.detail,
                 replace(d, kind="matches the reference", says=says))
