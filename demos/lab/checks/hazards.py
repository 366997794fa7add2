"""The support matrix's rows of real use: what a Function meets where a model uses it, which
gradcheck never shows it (checks.md, "Where gradcheck is silent"): grad_output in other
layouts, one tensor passed twice, checkpointing, saved-tensor hooks, autocast; what it saves
(a note); and the check of what it keeps on ctx."""
from __future__ import annotations

import contextlib
import linecache
import math
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch.autograd.graph import save_on_cpu, saved_tensors_hooks
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from demos.lab.checks.gradients import NotRun
from demos.lab.checks.matching import Mismatch, needing, weights
from demos.lab.core.results import Check
from demos.lab.core.text import message, one_line, where
from demos.lab.core.tolerance import FLOAT64_TOL
from demos.lab.tensors import abs_error, agree, fresh, output_tensors

MOST_PAIRS = 6  # aliased_inputs: at most this many pairs of inputs


def gradients(fn: Callable, xs: Mapping[str, torch.Tensor],
              grads: Sequence[torch.Tensor] | None = None,
              call: Callable[..., Any] | None = None) -> tuple[tuple, list[torch.Tensor | None]]:
    """fn's outputs and, by backward from the outputs that carry a gradient with `grads` (by
    default fixed random ones), the gradients of the inputs that require grad; on fresh copies
    of `xs`, `fn` called through `call` (checkpoint, autocast) where given, torch's random
    numbers seeded the same each time (a dropout draws the same mask in every run)."""
    leaves = fresh(xs, dtype=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        outs = output_tensors((call or (lambda f, *a: f(*a)))(fn, *leaves.values()))
        live = [o for o in outs if o.requires_grad]
        wrt = [leaves[k] for k in needing(leaves)]
        if not live or not wrt:
            return outs, [None] * len(wrt)
        return outs, list(torch.autograd.grad(live, wrt, list(grads or weights(live, seed=5)),
                                              allow_unused=True))


def repeats(fn: Callable, xs: Mapping[str, torch.Tensor]) -> None:
    """NotRun ('skipped') where two runs of forward and backward give other gradients (state
    of its own, outside torch's random numbers): rows that compare two runs cannot judge it."""
    if not agreeing(gradients(fn, xs)[1], gradients(fn, xs)[1]):
        raise NotRun("skipped", "not judged: two runs of its forward and backward give other "
                                "gradients (something random or stateful in it, beyond "
                                "torch's random numbers)")


def sparse_inside(fn: Callable, xs: Mapping[str, torch.Tensor]) -> bool:
    """Whether a forward of fn takes, saves or returns a sparse tensor: the rows of real use
    take dense ones (their hooks, layouts and autocast are dense tensors' questions)."""
    if any(x.layout != torch.strided for x in xs.values()):
        return True
    layouts: list[torch.layout] = []
    with contextlib.suppress(Exception), saved_tensors_hooks(
            lambda t: layouts.append(t.layout) or t, lambda t: t):
        layouts += [o.layout for o in output_tensors(fn(*fresh(xs, dtype=None).values()))]
    return any(layout != torch.strided for layout in layouts)


def agreeing(got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor | None]) -> bool:
    """Whether two lists of gradients (None as zero) are the same, within FLOAT64_TOL."""
    return all(agree(torch.zeros_like(b) if a is None else a, torch.zeros_like(a) if b is None
                     else b, *FLOAT64_TOL, equal_nan=True) if a is not None or b is not None
               else True for a, b in zip(got, want))


def worst(got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor | None],
          names: Sequence[str]) -> str:
    """Which gradient differs most, and by how much: 'x's gradient (max abs err 0.5)'."""
    errs = [(abs_error(a if a is not None else torch.zeros_like(b),
                       b if b is not None else torch.zeros_like(a)).max().item(), k)
            for k, a, b in zip(names, got, want) if a is not None or b is not None]
    err, name = max(errs) if errs else (math.nan, "a")
    return f"{name}'s gradient (max abs err {err:.3g})"


def at_line(e: BaseException) -> str:
    """Where in the user's code `e` was raised, with the line: ' (at f.py:14: g.view(-1))'."""
    at = where(e)
    if not at:
        return ""
    path, _, rest = at.rpartition(":")
    line = linecache.getline(path, int(rest.split()[0])).strip() if rest[:1].isdigit() else ""
    return f" (at {at}{': ' + line if line else ''})"


# -- grad_layouts ------------------------------------------------------------------------------
LAYOUTS = ("transposed", "expanded (stride 0)", "sliced (with gaps)")


def laid_out(g: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """grad_output in another layout, as the ops after a Function hand it to its backward
    (`y.t()` after it a transposed one, `y.sum()` an expanded one, a slice of a bigger gradient
    one with gaps), and the same values contiguous; None where its shape has no such layout."""
    if layout == "transposed" and g.dim() >= 2:
        return g.mT.contiguous().mT, g
    if layout.startswith("expanded") and g.dim() >= 1 and g.numel() > 1:
        first = g[tuple(slice(0, 1) for _ in range(g.dim()))]  # one element, kept 1 x ... x 1
        return first.expand(g.shape), first.expand(g.shape).contiguous()
    if layout.startswith("sliced") and g.dim() >= 1 and g.numel() > 1:
        wide = torch.zeros(*g.shape[:-1], 2 * g.shape[-1], dtype=g.dtype, device=g.device)
        wide[..., ::2] = g
        return wide[..., ::2], g
    return None


def grad_layouts(fn: Callable, xs: Mapping[str, torch.Tensor]) -> str:
    """backward given grad_output transposed, expanded and sliced gives the gradients it gives
    for the same values contiguous (one forward, its backward run with each): gradcheck
    passes a contiguous one, always."""
    names, leaves = needing(xs), fresh(xs, dtype=None)
    outs = [o for o in output_tensors(fn(*leaves.values())) if o.requires_grad]
    if not outs or not names:
        return "skipped: no output carries a gradient to an input"
    wrt, tried = [leaves[k] for k in names], []
    for layout in LAYOUTS:
        made = [laid_out(g, layout) or (g, g) for g in weights(outs, seed=5)]
        if all(given is plain for given, plain in made):
            continue  # no output has this layout
        tried.append(layout.split()[0])
        want = torch.autograd.grad(outs, wrt, [plain for _, plain in made], retain_graph=True,
                                   allow_unused=True)
        try:
            got = torch.autograd.grad(outs, wrt, [given for given, _ in made],
                                      retain_graph=True, allow_unused=True)
        except Exception as e:
            fix = ("use .reshape() or .contiguous() first" if "view" in message(e) else
                   "call grad_output.contiguous() before reading its memory")
            raise Mismatch(f"backward raises given grad_output {layout}: "
                           f"{one_line(e, 200, located=False)}{at_line(e)} -> {fix}") from None
        if not agreeing(got, want):
            raise Mismatch(f"grad_output {layout} gives other gradients than the same values "
                           f"contiguous: {worst(got, want, names)}: backward reads "
                           f"grad_output's memory as if it were contiguous (data_ptr, a flat "
                           f"view, a kernel) -> call grad_output.contiguous() first")
    if not tried:
        return "skipped: every output is 0-d or one element: grad_output has one layout"
    return f"the same gradients for a grad_output {', '.join(tried)} as for a contiguous one"


# -- aliased_inputs ----------------------------------------------------------------------------
def aliased_inputs(fn: Callable, xs: Mapping[str, torch.Tensor]) -> str:
    """apply(x, x), as tied weights pass one tensor twice, gives apply(x, x.clone())'s value
    and, for x, the sum of the two gradients."""
    names = list(xs)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if xs[a].requires_grad and xs[b].requires_grad and xs[a].shape == xs[b].shape
             and xs[a].dtype == xs[b].dtype and xs[a].layout == torch.strided][:MOST_PAIRS]
    if not pairs:
        return "skipped: no two inputs that require grad have one shape and dtype"
    repeats(fn, xs)
    for a, b in pairs:
        said = f"{a} and {b} one tensor"
        try:
            value, twice = tied(fn, xs, a, b, together=True)
        except Exception as e:
            raise Mismatch(f"with {said} (tied weights) it raises: "
                           f"{one_line(e, 200, located=False)}{at_line(e)} -> it assumes "
                           f"distinct inputs (changes one in place, or keeps one by "
                           f"reference): copy what it keeps, or compute out of place") from None
        apart_value, apart = tied(fn, xs, a, b, together=False)
        if not agreeing(value, apart_value):
            raise Mismatch(f"with {said} its value differs from theirs with {b} a copy of "
                           f"{a}: forward assumes distinct inputs (it writes one in place and "
                           f"reads the other after) -> read both before writing, or compute "
                           f"out of place")
        if not agreeing(twice, apart):
            raise Mismatch(f"with {said} (tied weights) its gradient is not the sum of {a}'s "
                           f"and {b}'s: {worst(twice, apart, [a])}: it assumes distinct inputs "
                           f"(forward writes one in place after saving the other as it is, "
                           f"or backward gives one gradient for both) -> save a copy of what "
                           f"forward then changes, or compute out of place; and compute each "
                           f"input's gradient on its own: autograd sums them")
    return f"one tensor as {', '.join(' and '.join(p) for p in pairs)}: the same value, and the " \
           f"sum of the two gradients"


def tied(fn: Callable, xs: Mapping[str, torch.Tensor], a: str, b: str,
         together: bool) -> tuple[tuple, list[torch.Tensor | None]]:
    """fn with inputs a and b one tensor (`together`), or b a copy of a: its outputs, and the
    gradient of that one tensor (together) or the sum of the two (apart)."""
    leaves = fresh(xs, dtype=None)
    leaves[b] = leaves[a] if together else leaves[a].detach().clone().requires_grad_()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        outs = output_tensors(fn(*leaves.values()))
        live = [o for o in outs if o.requires_grad]
        grads = torch.autograd.grad(live, [leaves[a], leaves[b]], weights(live, seed=6),
                                    allow_unused=True)
    both = [g for g in (grads[:1] if together else grads) if g is not None]
    return outs, [sum(both) if both else None]


# -- checkpoint --------------------------------------------------------------------------------
def checkpoint(fn: Callable, xs: Mapping[str, torch.Tensor]) -> str:
    """Forward and backward inside torch.utils.checkpoint (use_reentrant=False), which runs
    the forward again in backward, give the gradients they give without it."""
    names = needing(xs)
    if not names:
        return "skipped: no input requires grad"
    outs, want = gradients(fn, xs)
    if not any(o.requires_grad for o in outs):
        return "skipped: no output carries a gradient"
    try:
        with warnings_ignored():
            _, got = gradients(fn, xs, call=lambda f, *a: torch_checkpoint(
                f, *a, use_reentrant=False))
    except Exception as e:
        fix = ("read ctx.saved_tensors once" if "unpacked once" in message(e) else
               "make forward a function of its inputs")
        raise Mismatch(f"under checkpoint(use_reentrant=False) it raises: "
                       f"{one_line(e, 200, located=False)}{at_line(e)} -> {fix}") from None
    if agreeing(got, want):
        return "checkpoint(use_reentrant=False) gives the same gradients"
    again = gradients(fn, xs)[0]
    what = ("the forward gives other values when run again (state outside torch's random "
            "numbers: a generator of its own, a counter)" if not agreeing(again, outs) else
            "the forward run again gave the same values but saved others (state it reads and "
            "changes: a counter, a global, a running statistic)")
    raise Mismatch(f"under checkpoint(use_reentrant=False), which runs forward again in "
                   f"backward, the gradients differ: {worst(got, want, names)}: {what} -> make "
                   f"forward a function of its inputs (state outside it, a seed passed in)")


@contextlib.contextmanager
def warnings_ignored() -> Iterator[None]:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- saved_hooks -------------------------------------------------------------------------------
class ReadTwice(RuntimeError):
    """A saved tensor unpacked a second time under a hook that frees it on the first."""


def freeing() -> saved_tensors_hooks:
    """Hooks that copy a saved tensor on pack and free it on its first unpack, as offloading
    does (TransformerEngine's CPU offload frees what it handed back)."""
    def pack(t: torch.Tensor) -> list[torch.Tensor]:
        return [t.detach().clone()]

    def unpack(held: list[torch.Tensor]) -> torch.Tensor:
        if not held:
            raise ReadTwice("a saved tensor was read twice (ctx.saved_tensors read again)")
        return held.pop()
    return saved_tensors_hooks(pack, unpack)


def saved_hooks(fn: Callable, xs: Mapping[str, torch.Tensor]) -> str:
    """Under saved-tensor hooks that free on the first unpack, and under save_on_cpu, the
    gradients are unchanged."""
    names = needing(xs)
    if not names:
        return "skipped: no input requires grad"
    repeats(fn, xs)
    want = gradients(fn, xs)[1]
    for name, hooks in (("saved tensors freed once read", freeing),
                        ("save_on_cpu", save_on_cpu)):
        try:
            with hooks():
                got = gradients(fn, xs)[1]
        except ReadTwice as e:
            raise Mismatch(f"backward reads ctx.saved_tensors twice{at_line(e)}: under {name} "
                           f"(offloading) the second read finds nothing -> read it once: "
                           f"x, = ctx.saved_tensors") from None
        if not agreeing(got, want):
            raise Mismatch(f"under {name} the gradients differ: {worst(got, want, names)}: "
                           f"backward reads what it saved other than through "
                           f"ctx.saved_tensors -> save it with save_for_backward")
    return "the same gradients with saved tensors freed once read (offloading), and save_on_cpu"


# -- autocast ----------------------------------------------------------------------------------
def autocast(fn: Callable, xs: Mapping[str, torch.Tensor], reference: Callable | None) -> str:
    """With its forward under torch.autocast (CPU bfloat16; CUDA float16 where a GPU is) and its
    backward after it, as a training step runs them: both run, the gradients have their inputs'
    dtype, and they are as close to the float32 reference's as the reference's own autograd
    gets under the same autocast (measured, not a tolerance guessed)."""
    names = needing(xs)
    if not names:
        return "skipped: no input requires grad"
    repeats(fn, xs)
    if any(o.is_complex() for o in output_tensors(fn(*fresh(xs, dtype=None).values()))):
        raise NotRun("unsupported", "a complex output: autocast has no complex half precision")
    found = []
    for device, dtype in (("cpu", torch.bfloat16), *((("cuda", torch.float16),)
                                                      if torch.cuda.is_available() else ())):
        x32 = {k: v.detach().to(device, torch.float32).requires_grad_(v.requires_grad)
               for k, v in xs.items()}
        said, under = f"autocast({device!r}, {str(dtype).removeprefix('torch.')})", \
            forward_under(device, dtype)
        fix = (f"@torch.amp.custom_fwd(device_type={device!r}) on forward (cast_inputs="
               f"torch.float32 to run it in float32) and @torch.amp.custom_bwd(device_type="
               f"{device!r}) on backward")
        try:
            got = gradients(fn, x32, call=under)[1]
        except Exception as e:
            raise Mismatch(f"its forward under {said}, its backward after it, raise: "
                           f"{one_line(e, 200, located=False)}{at_line(e)} -> {fix}") from None
        if reference is None:
            found.append(f"{said} runs (not compared: no reference)")
            continue
        truth, theirs = (gradients(reference, x32, call=c)[1] for c in (None, under))
        mine, allowed = error(got, truth), error(theirs, truth)
        if mine > 4 * allowed + 1e-6 * scale(truth):
            raise Mismatch(f"under {said} its gradients are {mine:.3g} off the float32 "
                           f"reference's, where the reference's own autograd under it is "
                           f"{allowed:.3g} off: backward runs in another precision than "
                           f"forward -> {fix}")
        found.append(f"{said}: gradients {mine:.2g} off float32's (the reference's own, "
                     f"{allowed:.2g})")
    return "; ".join(found)


def forward_under(device: str, dtype: torch.dtype) -> Callable[..., Any]:
    """A call of a function under torch.autocast: its forward (backward runs after it)."""
    def call(f: Callable, *args: Any) -> Any:
        with torch.autocast(device, dtype=dtype):
            return f(*args)
    return call


def error(got: Sequence[torch.Tensor | None], truth: Sequence[torch.Tensor | None]) -> float:
    """The largest absolute difference between two lists of gradients (None as zero)."""
    return max((abs_error(a if a is not None else torch.zeros_like(b),
                          b if b is not None else torch.zeros_like(a)).max().item()
                for a, b in zip(got, truth) if a is not None or b is not None), default=0.0)


def scale(ts: Sequence[torch.Tensor | None]) -> float:
    return max((t.abs().max().item() for t in ts if t is not None and t.numel()), default=0.0)


# -- memory (a note) ---------------------------------------------------------------------------
MOST_SAVED = 8  # memory: past this many saved tensors, which backward reads is not tried


def memory(fn: Callable, xs: Mapping[str, torch.Tensor], reference: Callable | None) -> str:
    """What the Function saves for backward (through saved-tensor hooks: count and bytes),
    which of it backward never reads (its gradients the same with that tensor NaN), and what
    the reference's autograd saves: a note."""
    if not needing(xs):
        return "skipped: no input requires grad"
    leaves = fresh(xs, dtype=None)
    saved, outs = kept(fn, leaves)
    if not saved:
        note = "saves nothing"
    else:
        names = {t.data_ptr(): k for k, t in leaves.items()} | {
            o.data_ptr(): "the output" if len(outs) == 1 else f"output {i}"
            for i, o in enumerate(outs)}
        said = [names.get(t.data_ptr(), f"a {tuple(t.shape)} tensor") for t in saved]
        sizes = [t.numel() * t.element_size() for t in saved]
        note = f"saves {words(said)} (" + (f"{len(saved)} x {human(sizes[0])}" if
                                           len(set(sizes)) == 1 else human(sum(sizes))) + ")"
        unread = [k for i, k in enumerate(said) if i < MOST_SAVED and not read(fn, xs, i)]
        note += f"; backward never reads {words(unread)}" if unread else ""
    if reference is not None:
        theirs = kept(reference, fresh(xs, dtype=None))[0]
        note += f"; the reference's autograd saves {len(theirs)} tensor(s), " \
                f"{human(sum(t.numel() * t.element_size() for t in theirs))}"
    return note


def kept(fn: Callable, leaves: Mapping[str, torch.Tensor]) -> tuple[list[torch.Tensor], tuple]:
    """What one forward saves for backward (each storage once), and its outputs."""
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if all(s.data_ptr() != t.data_ptr() for s in saved):
            saved.append(t)
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        outs = output_tensors(fn(*leaves.values()))
    return saved, outs


def read(fn: Callable, xs: Mapping[str, torch.Tensor], index: int) -> bool:
    """Whether backward reads the values of the `index`th tensor its forward saves: its
    gradients change with that tensor NaN (a tensor saved to read its shape is not read)."""
    base = gradients(fn, xs)[1]
    seen: list[int] = []

    def pack(t: torch.Tensor) -> tuple[int, torch.Tensor]:
        if t.data_ptr() not in seen:
            seen.append(t.data_ptr())
        return seen.index(t.data_ptr()), t

    def unpack(held: tuple[int, torch.Tensor]) -> torch.Tensor:
        i, t = held
        return torch.full_like(t, math.nan) if i == index and t.is_floating_point() else t

    try:
        with saved_tensors_hooks(pack, unpack):
            poisoned = gradients(fn, xs)[1]
    except Exception:
        return True
    return not agreeing(poisoned, base)


def words(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def human(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.3g} KiB" if n < 1 << 20 else \
        f"{n / (1 << 20):.3g} MiB"


# -- ctx hygiene (a check) ---------------------------------------------------------------------
KEPT = "tensors saved with save_for_backward"


def kept_on_ctx(apply: Callable, arguments: Mapping[str, Any]) -> Check:
    """KEPT: no tensor kept as a ctx attribute (in a tuple, list or dict too) is an output of
    the Function (or a view of one) or an input that requires grad: torch asks for
    save_for_backward there. Other tensors on ctx are listed in the detail."""
    outs = output_tensors(apply(*arguments.values()))
    node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
    if node is None or not hasattr(node, "__dict__"):
        return Check(KEPT, None, "not checked: no node of the Function's own to look at")
    storages = {k: storage(v) for k, v in arguments.items()
                if isinstance(v, torch.Tensor) and v.requires_grad}
    output = {storage(o) for o in outs} - {None}
    wrong, notes = [], []
    for path, t in attributes(vars(node)):
        ptr = storage(t)
        if ptr in output:
            wrong.append(f"{path} holds the output (a cycle: it keeps the graph alive)")
        elif ptr is not None and ptr in storages.values():
            k = next(k for k, p in storages.items() if p == ptr)
            wrong.append(f"{path} holds {k}, an input that requires grad")
        else:
            notes.append(f"{path} ({str(t.dtype).removeprefix('torch.')} {tuple(t.shape)})")
    other = f"; also on ctx: {', '.join(notes)} (fine: intermediates, labels, masks)" \
        if notes else ""
    if wrong:
        return Check(KEPT, False, f"{'; '.join(wrong)}: save it with ctx.save_for_backward "
                                  f"and read it from ctx.saved_tensors (a tensor kept on ctx "
                                  f"escapes saved-tensor hooks, checkpointing and offloading, "
                                  f"and no version counter guards it){other}")
    return Check(KEPT, True, "no output or input that requires grad kept on ctx" + other)


def storage(t: torch.Tensor) -> int | None:
    """Where a tensor's memory starts (its views' too); None for a sparse one."""
    return t.untyped_storage().data_ptr() if t.layout == torch.strided else None


def attributes(held: Mapping[str, Any], path: str = "ctx") -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors in a ctx's attributes, by path: ctx.y, ctx.pair[0], ctx.d['w']."""
    for k, v in held.items():
        at = f"{path}.{k}" if path == "ctx" else f"{path}[{k!r}]"
        if isinstance(v, torch.Tensor):
            yield at, v
        elif isinstance(v, (tuple, list)):
            yield from attributes(dict(enumerate(v)), at)
        elif isinstance(v, dict):
            yield from attributes(v, at)
