"""What a custom autograd Function supports under today's autograd, transform by transform:
`matrix`, a row per capability, each run by the function `rows_of` names (the rows and their
statuses: checks.md, "What a Function supports")."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import warnings
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd.gradcheck import GradcheckError

from demos.lab.checks import hazards
from demos.lab.checks.diagnose import second_against_numbers
from demos.lab.checks.gradients import (
    NotRun,
    gradcheck_failure,
    parity,
    torch_check,
)
from demos.lab.checks.matching import (
    IN_FLOAT32,
    Mismatch,
    grads_of,
    matches,
    must_agree,
    needing,
    scalar,
    weights,
)
from demos.lab.checks.repro import script
from demos.lab.core.results import CAPABILITIES, Check, Reproduction, Row
from demos.lab.core.signals import Stopped
from demos.lab.core.text import message, one_line, where
from demos.lab.core.tolerance import FLOAT32_TOL
from demos.lab.state import global_state, restore_global_state
from demos.lab.tensors import abs_error, fresh, in_brief, output_tensors

# torch's refusals, by the words of its message, and what to add to the Function
REFUSALS = [
    (r"must override the setup_context staticmethod",
     "split forward(ctx, ...) into forward(...) and setup_context(ctx, inputs, output)"),
    (r"must implement the jvp function",
     "add a jvp staticmethod (save what it needs with ctx.save_for_forward)"),
    (r"vmap staticmethod or set generate_vmap_rule",
     "set generate_vmap_rule = True, or write a vmap staticmethod"),
    (r"custom `?jvp`?", "torch.compile (Dynamo) cannot trace a Function that defines jvp"),
    (r"once_differentiable|trying to differentiate twice",
     "write backward with differentiable torch ops, without @once_differentiable"),
    (r"returning a view \(or an input as-is\) but the jvp is not returning a view",
     "make jvp return a view too (e.g. x_t.view_as(x_t))"),
    (r"called random operation while in randomness error mode",
     "vmap needs randomness='different' or 'same' for a random forward"),
    (r"no output carries a tangent",
     "it has no forward-mode rule (a custom op's torch.library.register_autograd gives "
     "reverse mode alone)"),
    (r"data-dependent expression|[Dd]ata-dependent",
     "a Python branch on a tensor's value cannot be compiled with fullgraph=True"),
]
# exception types that are torch refusing, whatever their words (Dynamo's graph breaks)
REFUSING_TYPES = {"Unsupported": "torch.compile (Dynamo) cannot trace this with fullgraph=True"}
COMPILED_BACKEND = "aot_eager"  # the compiled rows' backend: Dynamo and AOTAutograd, no codegen
# the rows of real use (demos.lab.checks.hazards)
HAZARDS = ("grad_layouts", "aliased_inputs", "checkpoint", "saved_hooks", "autocast", "memory")
# every row but inductor's, which runs only where asked for (its first compile builds C++)
DEFAULT_ROWS = tuple(r for r in CAPABILITIES if r != "inductor")


class TorchDiffers(Exception):
    """torch's compiled path gives other numbers than eager torch on the same Function and
    inputs: torch's disagreement, not the Function's mistake; args: the row's detail, and
    what a reproduction needs (repro.script's case; inductor's row has none)."""


def matrix(fn: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
           reference: Callable[..., Any] | None = None, device: torch.device | None = None,
           rows: Sequence[str] = DEFAULT_ROWS, intended: bool = False,
           float32: bool = False, name: str | None = None) -> dict[str, Row]:
    """The support matrix of `fn` (a Function's apply) at `inputs` (their requires_grad kept).
    `intended`: the backward is deliberately not the derivative; the rows compare with
    `reference`'s autograd, never with finite differences. `float32`: the Function computes in
    float32, judged at float32's tolerance. `name`: a `differs` row's reproduction is
    repro_<name>_<row>.py (None: none). The caller's random draws, torch's settings, the
    working directory and the environment are as they were after it."""
    before = global_state()
    token = IN_FLOAT32.set(float32)
    try:
        with torch.random.fork_rng(devices=[]):
            found = dict(rows_of(fn, inputs, as_autograd(reference, inputs), device, rows,
                                 intended, name))
        return {k: found[k] for k in rows}
    finally:
        IN_FLOAT32.reset(token)
        restore_global_state(before)


def as_autograd(reference: Callable[..., Any] | None, inputs: Mapping[str, torch.Tensor]) -> Any:
    """`reference` called as autograd calls it: in grad mode, each input that requires grad in
    `inputs` requiring grad (a row's detached copy made a leaf that does), so that checks.md's
    hook recipe (`y = x * 1.0; y.register_hook(...)`) runs in every row."""
    need = [x.requires_grad for x in inputs.values()]
    return reference and (lambda *args: torch.enable_grad()(reference)(*[
        a.detach().requires_grad_() if n and not a.requires_grad else a
        for a, n in zip(args, need)]))


def rows_of(fn: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
            reference: Callable[..., Any] | None, device: torch.device | None,
            rows: Sequence[str], intended: bool = False,
            name: str | None = None) -> Iterator[tuple[str, Row]]:
    """The rows, the backward's first: compiled torch.func.grad does not run the backward, so
    where the backward fails, eager's gradient is not torch's to differ from (`attempt`)."""
    xs = fresh(inputs, device or torch.device("cpu"))
    sparse = any(x.layout != torch.strided for x in xs.values())
    runs = {"backward": (lambda f, x: as_intended(f, x, reference)) if intended else backward,
            "double_backward": double,
            "forward_ad": lambda f, x: forward_ad(f, x, reference, numerical=not intended),
            "func_grad": lambda f, x: func_grad(f, x, reference), "vmap": vmap,
            "compile": compiled, "compile_grad": compiled_grad, "compile_jvp": compiled_jvp,
            "compile_vmap": compiled_vmap, "inductor": inductor,
            "float32": lambda f, x: float32(f, x, reference),
            "noncontiguous": noncontiguous, "cuda": cuda,
            "grad_layouts": hazards.grad_layouts, "aliased_inputs": hazards.aliased_inputs,
            "checkpoint": hazards.checkpoint, "saved_hooks": hazards.saved_hooks,
            "autocast": lambda f, x: hazards.autocast(f, x, reference),
            "memory": lambda f, x: hazards.memory(f, x, reference)}
    failing = False
    sparse_use = sparse or any(r in HAZARDS for r in rows) and hazards.sparse_inside(fn, xs)
    for row in sorted(rows, key=lambda r: r != "backward"):
        if row in ("backward", "double_backward", "forward_ad", "func_grad") and not needing(xs):
            yield row, Row("skipped", "no input requires grad")
            continue
        if row in HAZARDS and sparse_use:
            yield row, Row("unsupported", "a sparse tensor taken, saved or returned: the rows "
                                          "of real use take dense ones")
            continue
        # fresh copies: a Function that changes an input in place changes only these
        found = attempt(partial(runs[row], fn, fresh(xs)), sparse, name and (name, row),
                        "the backward row fails" if failing and row == "compile_grad" else None,
                        compiling=row.startswith("compile") or row == "inductor")
        failing = failing or row == "backward" and found.status == "fails"
        yield row, found


def attempt(run: Callable[[], str], sparse: bool = False, repro: tuple[str, str] | None = None,
            unjudged: str | None = None, compiling: bool = False) -> Row:
    """Run a row: its detail when it works, `fails` on a mismatch or an unexpected error,
    `unsupported` when torch refuses (with `sparse` inputs, any error of torch's: its
    transforms and its compiler take few sparse tensors; `compiling`, torch.compile crashing
    inside torch), `differs` where torch's compiled path does (with its reproduction,
    repro_<name>_<row>.py, `repro` naming them), or `skipped` for that if `unjudged` says why
    torch's numbers cannot be judged."""
    try:
        with warnings.catch_warnings():  # torch's own (anomaly traces, deprecations): noise
            warnings.simplefilter("ignore")
            detail = run()
    except Mismatch as e:
        return Row("fails", message(e))
    except TorchDiffers as e:
        said, case = (*e.args, None)[:2]  # inductor's: no reproduction of its own
        if unjudged:
            return Row("skipped", f"not judged: {unjudged}, and compiled torch.func.grad does "
                                  f"not run your backward; {said}")
        if repro is None or case is None:
            return Row("differs", said)
        file = f"repro_{repro[0]}_{repro[1]}.py"
        return Row("differs", f"{said}; reproduce it alone: python {file}",
                   Reproduction(file, script(case, *repro)))
    except CompileRefused as e:
        return Row("unsupported", message(e))
    except NotRun as e:
        return Row(*e.args)
    except Stopped:  # Ctrl-C again, from a notebook: the run's, not the row's
        raise
    except KeyboardInterrupt:
        return Row("fails", "KeyboardInterrupt: raised by the Function")
    except SystemExit as e:  # a Function that ends its process fails its row
        return Row("fails", f"SystemExit: the Function called sys.exit({e.code!r})")
    except Exception as e:
        hint = next((hint for pattern, hint in REFUSALS if re.search(pattern, message(e))),
                    REFUSING_TYPES.get(type(e).__name__)) or (sparse and "torch does not take "
                                                              "these sparse tensors here")
        if hint:
            return Row("unsupported", f"{one_line(e, 300)} -> {hint}")
        if compiling and not where(e):  # raised in torch's code alone: torch's failure
            return Row("unsupported", f"{one_line(e, 300)} -> torch.compile crashed inside "
                                      f"torch: torch's failure, not your Function's")
        return Row("fails", one_line(e))
    except BaseException as e:  # not an Exception (asyncio.CancelledError, ...): the row's
        return Row("fails", one_line(e))
    if detail.startswith("skipped: "):
        return Row("skipped", detail.removeprefix("skipped: "))
    return Row("ok", detail)


# -- the rows ---------------------------------------------------------------------------------
def checked(check: Callable, fn, xs, **kwargs) -> list[str]:
    """gradcheck or gradgradcheck, as torch_check runs it (at float32's tolerance where the
    matrix says so); a mismatch names the input (x, not 'input 0'). Returns torch_check's how."""
    try:
        return torch_check(check, fn, xs, IN_FLOAT32.get(), **kwargs)
    except GradcheckError as e:
        raise Mismatch(gradcheck_failure(e, needing(xs))) from None


def backward(fn, xs) -> str:
    how = checked(torch.autograd.gradcheck, fn, xs)
    return "; ".join([f"gradcheck w.r.t. {', '.join(needing(xs))}", *how])


def double(fn, xs) -> str:
    # a backward under @once_differentiable: its gradients carry a DelayedError, which only
    # fires when the incoming gradient requires grad (gradgradcheck would read zeros instead)
    outs = output_tensors(fn(*xs.values()))
    seeds = [torch.ones(o.shape, dtype=o.dtype, device=o.device, requires_grad=True)
             for o in outs if o.requires_grad]  # dense, for a sparse output too
    firsts = torch.autograd.grad([o for o in outs if o.requires_grad], [xs[k] for k in needing(xs)],
                                 seeds, create_graph=True, allow_unused=True)
    if any(g is not None and type(g.grad_fn).__name__ == "Error" for g in firsts):
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")
    try:
        checked(torch.autograd.gradgradcheck, fn, xs)
    except Mismatch as e:  # why, where it can be said (a backward through no graph: the fix)
        why = second_against_numbers(fn, fresh(xs))
        raise Mismatch(f"{message(e)}: {why.says}" if why else message(e)) from None
    return "gradgradcheck"


def as_intended(fn, xs, reference) -> str:
    """The backward against the intended gradient, the reference's, for random weights on the
    outputs (an intended gradient is not the forward's derivative: no finite differences)."""
    matches("", fn, xs, reference, xs, value=False)
    return f"the backward's gradients of {', '.join(needing(xs))} are the intended ones"


def forward_ad(fn, xs, reference, numerical: bool = True) -> str:
    fn = cloning(fn)
    forward_rule(fn, xs, needing(xs))
    if numerical:  # an intended gradient has no numerical twin: the reference's alone
        checked(torch.autograd.gradcheck, fn, xs, check_forward_ad=True,
                check_backward_ad=False, check_undefined_grad=False, check_batched_grad=False)
    if reference is None:
        return "gradcheck with forward AD"
    primals = tuple(v.detach() for v in xs.values())
    tangents = tuple(weights(primals, seed=3))
    got = torch.func.jvp(fn, primals, tangents)
    must_agree("jvp value", got[0], reference(*primals))
    must_agree("jvp tangent", got[1], jvp_by_reverse(reference, primals, tangents))
    return "gradcheck with forward AD; torch.func.jvp matches the reference"


def cloning(fn: Callable) -> Callable:
    """`fn` on copies of its tensors (x.clone(), in the graph, under any transform): each call
    of a mark_dirty Function gets inputs and tangents of its own, as in torch's own tests."""
    return lambda *args: fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))


def forward_rule(fn, xs, names: Sequence[str]) -> None:
    """Raise where eager forward mode, inputs `names` carrying tangents, gives no output one:
    torch says nothing where there is no rule, and torch.func.jvp gives zeros."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(v.detach().clone(), torch.ones_like(v)) if k in names else v
                 for k, v in xs.items()]
        outs = [o for o in output_tensors(fn(*duals)) if o.is_floating_point()]
        if outs and all(fwAD.unpack_dual(o).tangent is None for o in outs):
            raise RuntimeError("no output carries a tangent in forward mode")


def jvp_by_reverse(f: Callable, primals: Sequence[torch.Tensor],
                   tangents: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """J·v of the plain-torch `f` at `primals` by reverse mode alone, as the gradient of Jᵀu·v
    with respect to u (why: checks.md, "Which rows run"); an output that does not depend on the
    inputs differentiably (a constant, integer indices, a detached mask) gets zeros, as forward
    mode gives it."""
    xs = [p.detach().clone().requires_grad_() for p in primals]  # f may change them in place
    outs = output_tensors(f(*[x.clone() for x in xs]))
    live = [i for i, o in enumerate(outs) if o.is_floating_point() and o.requires_grad]
    us = [torch.zeros_like(outs[i], requires_grad=True) for i in live]
    firsts = torch.autograd.grad([outs[i] for i in live], xs, us, create_graph=True,
                                 allow_unused=True) if live else [None] * len(xs)
    pairs = [(g * v).sum() for g, v in zip(firsts, tangents)
             if g is not None and g.requires_grad]
    jv = torch.autograd.grad(sum(pairs), us, allow_unused=True) if pairs else [None] * len(us)
    by_output = dict(zip(live, jv))
    return tuple(by_output[i].detach() if by_output.get(i) is not None
                 else torch.zeros_like(o).detach() for i, o in enumerate(outs))


def func_grad(fn, xs, reference) -> str:
    names = needing(xs)
    primals = tuple(v.detach() for v in xs.values())
    ws = weights(output_tensors(fn(*primals)))
    argnums = tuple(i for i, k in enumerate(xs) if k in names)
    got = torch.func.grad(scalar(fn, ws), argnums=argnums)(*primals)
    if reference is not None:
        want = torch.func.grad(scalar(reference, ws), argnums=argnums)(*primals)
        against = "the reference's gradient"
    else:
        want = grads_of(scalar(fn, ws), xs)
        against = "its own backward"
    for k, a, b in zip(names, got, want):
        must_agree(f"grad of {k}", a, b)
    return f"torch.func.grad w.r.t. {', '.join(names)} matches {against}"


def batch_of(xs) -> list[torch.Tensor]:
    """Three different versions of each input, stacked: (3, *shape) (a sparse one scaled)."""
    return [torch.stack([v, 0.9 * v + 0.05, 1.1 * v - 0.05] if v.layout == torch.strided
                        else [v, 0.9 * v, 1.1 * v]) for v in (x.detach() for x in xs.values())]


def vmap(fn, xs) -> str:
    fn = cloning(fn)  # a mark_dirty Function changes no batch that another call reads
    batched = batch_of(xs)
    got = torch.func.vmap(fn)(*batched)
    loop = [output_tensors(fn(*[b[i] for b in batched])) for i in range(3)]
    want = tuple(torch.stack(outs) for outs in zip(*loop))
    must_agree("vmap value", got, want)
    last = [b.movedim(0, -1) for b in batched]  # the batch as the last dim (in_dims=-1)
    must_agree("vmap value (batch in the last dim)",
               torch.func.vmap(fn, in_dims=tuple(-1 for _ in last))(*last), want)
    if len(xs) > 1:  # the first input shared by the whole batch (in_dims=None)
        first = next(iter(xs.values())).detach()
        shared = [output_tensors(fn(first, *[b[i] for b in batched[1:]])) for i in range(3)]
        must_agree("vmap value (first input unbatched, in_dims None)",
                   torch.func.vmap(fn, in_dims=(None, *[0] * (len(xs) - 1)))(first,
                                                                             *batched[1:]),
                   tuple(torch.stack(outs) for outs in zip(*shared)))
    names = needing(xs)
    if not names:
        return "values match a loop over the batch"
    ws = weights(loop[0])
    argnums = tuple(i for i, k in enumerate(xs) if k in names)
    got_g = torch.func.vmap(torch.func.grad(scalar(fn, ws), argnums=argnums))(*batched)
    each = [grads_of(scalar(fn, ws), {n: b[i].requires_grad_(xs[n].requires_grad)
                                      for n, b in zip(xs, batched)}) for i in range(3)]
    for j, k in enumerate(names):
        must_agree(f"vmap grad of {k}", got_g[j], torch.stack([g[j] for g in each]))
    return "values and gradients match a loop over the batch"


def compiled(fn, xs, backend: str = COMPILED_BACKEND) -> str:
    """torch.compile(fn, fullgraph=True): its value and gradients against eager's; under
    aot_eager without AOTAutograd's common-subexpression pass (why: checks.md's table)."""
    import torch._functorch.config

    whole = backend != COMPILED_BACKEND
    with torch._functorch.config.patch(cse=whole), fresh_compiler():
        matches("compiled", torch.compile(fn, fullgraph=True, backend=backend), xs, fn, xs)
    return (f"fullgraph=True ({backend} backend{'' if whole else ', without the CSE pass'}): "
            f"value and gradients match eager")


class CompileRefused(Exception):
    """torch.compile could not take a transform that eager torch ran: torch's limit."""


def against_eager(transform: str, f: Callable, args: Sequence[Any], fn, xs, backend: str,
                  **case: Any) -> None:
    """torch.compile(f)(*args), compiled afresh, against eager f(*args), `f` being `transform`
    of `fn`: an error in the compiled call is CompileRefused, other numbers TorchDiffers (what
    each means: checks.md, "When torch is the one that differs")."""
    compiler_on()  # said first: a compiler switched off is the reason, whatever eager does
    eager = cloning(f)(*args)  # each call on copies of its own (a mark_dirty Function)
    try:
        with fresh_compiler():
            compiled = cloning(torch.compile(f, backend=backend))(*args)
    except Exception as e:
        raise CompileRefused(f"{one_line(e, 300)} -> torch.compile cannot "
                             f"take {transform} of this Function (eager {transform} runs it)"
                             ) from None
    got, want = flat(compiled), flat(eager)
    try:
        must_agree(f"compiled {transform}", got, want)
    except Mismatch:
        err = max((abs_error(a, b).max().item() for a, b in zip(got, want)
                   if a.shape == b.shape and a.numel()), default=float("nan"))
        raise TorchDiffers(
            f"torch differs: torch.compile({transform}) (backend {backend}) gives "
            f"{', '.join(map(in_brief, got))} where eager {transform} gives "
            f"{', '.join(map(in_brief, want))} (max abs difference "
            f"{err:.3g}; torch {torch.__version__})",
            {"transform": transform, "backend": backend, "fn": fn,
             "inputs": {k: v.detach().cpu() for k, v in xs.items()}, **case}) from None


def flat(result: Any) -> tuple[torch.Tensor, ...]:
    """A transform's tensors in order: (values, tangents) of a jvp, each a tensor or a tuple."""
    return tuple(t for r in (result if isinstance(result, tuple) else (result,))
                 for t in output_tensors(r))


def compiler_on() -> None:
    """CompileRefused, naming the switch, where torch's compiler is switched off (compiled
    against eager would compare eager with itself, or fullgraph fail)."""
    import torch._dynamo.config

    env, off = os.environ.get, torch._dynamo.config.disable  # TORCH_COMPILE_DISABLE's, at load
    said = ("TORCHDYNAMO_DISABLE=1 in the environment" if env("TORCHDYNAMO_DISABLE") == "1" else
            "TORCH_COMPILE_DISABLE=1 in the environment" if off and
            env("TORCH_COMPILE_DISABLE") == "1" else "torch._dynamo.config.disable = True" if off
            else None)
    if said:
        raise CompileRefused(f"{said}: torch.compile compiles nothing in this process -> unset "
                             f"it to check this row")


@contextlib.contextmanager
def fresh_compiler() -> Iterator[None]:
    """torch's compiler for one row (compiler_on), which compiles afresh: what the row compiled
    (in code that held nothing compiled before it) is forgotten after it, and nothing else, so
    that a notebook's own compiled code keeps its caches (torch._dynamo.reset() emptied them)."""
    import torch._dynamo
    from torch._dynamo.convert_frame import input_codes, output_codes
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list as entries

    def codes() -> list[Any]:  # the code torch's compiler has met, in this process
        return [c for ref in [*input_codes.seen, *output_codes.seen] if (c := ref()) is not None]

    compiler_on()
    kept = {id(c) for c in codes() if entries(c)}
    try:
        yield
    finally:
        for c in codes():
            if id(c) not in kept:
                torch._dynamo.reset_code(c)


def compiled_grad(fn, xs, backend: str = COMPILED_BACKEND) -> str:
    """torch.compile(torch.func.grad(f)) against eager torch.func.grad(f), f the outputs
    weighted by fixed random numbers and summed."""
    names = needing(xs)
    if not names:
        return "skipped: no input requires grad"
    primals = tuple(v.detach() for v in xs.values())
    ws = weights(output_tensors(fn(*primals)))
    argnums = tuple(i for i, k in enumerate(xs) if k in names)
    against_eager("torch.func.grad", torch.func.grad(scalar(fn, ws), argnums=argnums), primals,
                  fn, xs, backend, weights=ws, argnums=argnums)
    return f"torch.func.grad compiled ({backend}): gradients match eager"


def compiled_jvp(fn, xs, backend: str = COMPILED_BACKEND) -> str:
    """torch.compile of torch.func.jvp against eager torch.func.jvp (a Function with a jvp):
    `unsupported` where eager forward mode is (no rule: no tangent, zeros on both sides)."""
    primals = tuple(v.detach() for v in xs.values())  # float64, as rows_of made them
    tangents = tuple(weights(primals, seed=4))
    compiler_on()  # a compiler switched off is said first, as in the other compiled rows
    forward_rule(fn, xs, list(xs))

    def jvp(*args):
        return torch.func.jvp(cloning(fn), args[:len(primals)], args[len(primals):])

    against_eager("torch.func.jvp", jvp, (*primals, *tangents), fn, xs, backend,
                  tangents=tangents)
    return f"torch.func.jvp compiled ({backend}): values and tangents match eager"


def compiled_vmap(fn, xs, backend: str = COMPILED_BACKEND) -> str:
    """torch.compile(torch.func.vmap(f)) against eager torch.func.vmap(f), over a batch of 3."""
    batched = batch_of(xs)
    against_eager("torch.func.vmap", torch.func.vmap(fn), batched, fn, xs, backend,
                  batched=batched)
    return f"torch.func.vmap compiled ({backend}): values match eager"


def inductor(fn, xs) -> str:
    """torch.compile with inductor (C++ code generated and built), forward and backward, and
    torch.func.grad: against eager. Skipped without a C++ compiler."""
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cc")):
        return "skipped: no C++ compiler here (inductor builds C++ on the CPU)"
    if next(iter(xs.values())).device.type != "cpu" and not torch.cuda.is_available():
        return "skipped: inductor runs here on the CPU"
    try:
        done = compiled(fn, xs, backend="inductor")
    except Mismatch as e:  # eager and the aot_eager row agree on the Function: inductor differs
        raise TorchDiffers(f"torch differs: inductor's compiled forward and backward against "
                           f"eager: {e} (torch {torch.__version__})") from None
    if needing(xs):
        try:
            compiled_grad(fn, xs, backend="inductor")
            done += "; torch.func.grad compiled matches eager"
        except (TorchDiffers, Mismatch):
            raise
        except Exception as e:  # torch.func refuses the Function: forward and backward alone
            done += f"; not torch.func.grad ({type(e).__name__})"
    return done


def float32(fn, xs, reference) -> str:
    x32 = fresh(xs, dtype=torch.float32)
    # the same numbers in float64: the Function's own float32 error, not its inputs' rounding
    x64 = fresh(x32)
    wrong = [str(o.dtype).removeprefix("torch.") for o in output_tensors(fn(*x32.values()))
             if o.is_floating_point() and o.dtype != torch.float32]
    if wrong:
        raise Mismatch(f"float32 inputs give {', '.join(wrong)} outputs")
    # (a gradient is float32 whatever the backward returns: autograd casts it to the input's)
    compared = matches("float32", fn, x32, reference or fn, x64, *FLOAT32_TOL)
    return f"{compared} within rtol {FLOAT32_TOL[0]:g}, atol {FLOAT32_TOL[1]:g} of float64"


def noncontiguous(fn, xs) -> str:
    gapped = {k: torch.stack([v.detach(), v.detach()], -1)[..., 0].requires_grad_(v.requires_grad)
              if v.dim() and v.layout == torch.strided else v for k, v in xs.items()}  # stride 2
    if all(v.layout != torch.strided or v.is_contiguous() for v in gapped.values()):
        return "skipped: only 0-d, empty or sparse inputs, which have no gaps to leave"
    return f"{matches('non-contiguous', fn, gapped, fn, xs)} match contiguous inputs"


def cuda(fn, xs) -> str:
    if not torch.cuda.is_available():
        return "skipped: no CUDA GPU here"
    if all(v.is_cuda for v in xs.values()):
        return "skipped: the inputs are on the GPU already (every other row ran there)"
    on_gpu = fresh(xs, torch.device("cuda"), dtype=None)
    return f"{matches('cuda', fn, on_gpu, fn, xs)} match the CPU"


def checks(rows: Mapping[str, Row], require: Sequence[str] = (),
           done: Mapping[str, str] | None = None, name: str = "support matrix") -> list[Check]:
    """The matrix as checks, each failure counted once (checks.md's "support matrix"): one
    check `name`, and one per row of `require`; `done` names the checks already made that run a
    row's own test (custom_function's gradcheck is the backward row)."""
    done = done or {}
    wrong = "backward" in rows and rows["backward"].status == "fails"

    def elsewhere(k: str) -> str | None:
        """Which other check counts failing row `k`; None: this one."""
        return ("its required check" if k in require else f"as the {done[k]} check found"
                if k in done else "follows from the backward row" if wrong and k != "backward"
                else None)

    failing = {k: elsewhere(k) or r.detail for k, r in rows.items() if r.status == "fails"}
    own = [k for k in failing if elsewhere(k) is None]
    found = [Check(f"support: {k} (required)", rows[k].status == "ok",
                   f"{rows[k].status}: {rows[k].detail}" if rows[k].detail else rows[k].status)
             for k in require if k in rows]
    parts = [f"{TORCH_DIFFERS if status == 'differs' else status}: "
             f"{', '.join(k for k, r in rows.items() if r.status == status)}"
             for status in ("ok", "differs", "unsupported", "skipped")
             if any(r.status == status for r in rows.values())]
    if failing:
        said = ", ".join(f"{k} ({why})" for k, why in failing.items())
        parts.insert(0, f"fails: {said}" if own else
                     f"fails, counted by the checks above: {said}")
    found.append(Check(name, not own, "; ".join(parts)))
    return found


def classic_and_twin(classic: type, twin: type, reference: Callable[..., Any],
                     inputs: Mapping[str, torch.Tensor], device: torch.device,
                     rows: Sequence[str]) -> tuple[dict[str, dict[str, Row]], list[Check]]:
    """For a document's Function and its modern twin: both matrices (Result.support) and the
    checks: the twin gives the classic values and gradients, no row of either fails
    (`unsupported` is what the README explains, not a failure)."""
    if not rows:
        return {}, []
    found = [parity(f"{twin.__name__} gives {classic.__name__}'s values and gradients",
                    twin.apply, classic.apply, inputs, device)]
    block = {fn.__name__: matrix(fn.apply, inputs, reference, device, rows, name=fn.__name__)
             for fn in (classic, twin)}
    for fn, rows_found in block.items():
        found += checks(rows_found, name=f"support matrix of {fn}")
    return block, found


# a `differs` row, said in a check's detail: torch's compiled path, not the Function
TORCH_DIFFERS = ("torch's compiled path differs from eager (torch's disagreement; whether the "
                 "backward itself is right is gradcheck's question)")
