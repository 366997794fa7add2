"""Grading a submission: its backward against the reference's autograd on the hidden inputs
(grading.yaml's seeds and shapes, grad_outputs random), points per check, hints from the lab's
diagnosis (demos.lab.checks.diagnose), and what a backward that calls autograd itself did.

The submission's forward is run (its backward needs what it saved) but not trusted: its value
is held to the reference's, and every gradient is compared with the reference's autograd at the
same inputs and grad_output, never with the submission's own.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from demos.exercises.results import GradeResult, Test, Ungradable
from demos.exercises.spec import Grading
from demos.exercises.table import MARGIN
from demos.lab.checks.diagnose import against_reference, second_against_numbers
from demos.lab.core.files import NotReadable, read_bytes
from demos.lab.core.results import Diagnosis
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import signal_handler
from demos.lab.core.text import one_line
from demos.lab.core.tolerance import REFERENCE_TOL
from demos.lab.tensors import agree, fresh, same

MAX_SOURCE = 1 << 20  # a submission's bytes
TIME_LIMIT = 120  # seconds for one submission's grading, its import included


class TooSlow(BaseException):
    """The submission's grading ran past TIME_LIMIT (a loop in it, at import or in backward).
    Not an Exception: the grader's own `except Exception` (a diagnosis that fails, a second
    derivative that cannot be taken) must not swallow it and go on with no time limit left."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Any:
    """TooSlow raised where the code is after `seconds` (SIGALRM: the main thread only)."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return

    def expire(*_: Any) -> None:
        raise TooSlow(f"took more than {seconds:g} s")

    with signal_handler(expire, (signal.SIGALRM,)):
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

# -- the submission -----------------------------------------------------------------------------

def load(path: str, name: str) -> type:
    """The class `name` of the submission at `path`, its module run in a fresh namespace (as a
    script would be, but not as __main__)."""
    shown = os.path.basename(path)
    try:
        source = read_bytes(path, MAX_SOURCE).decode()
    except NotReadable as e:
        raise Ungradable(f"{path}: cannot read it: {e}") from None
    except UnicodeDecodeError as e:
        raise Ungradable(f"{path}: cannot read it: {e}") from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise Ungradable(f"{shown}:{e.lineno or 1}: {type(e).__name__}: {e.msg}") from None
    except ValueError as e:  # a null byte
        raise Ungradable(f"{shown}:1: cannot compile it: {e}") from None
    module = types.ModuleType("submission")
    module.__file__ = str(path)
    try:
        exec(code, module.__dict__)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise Ungradable(f"{shown}:{line_in(e, path)}: importing it raised "
                         f"{one_line(e, 300, located=False)}") from None
    cls = module.__dict__.get(name)
    if cls is None:
        raise Ungradable(f"{shown}:1: no class {name} (grading.yaml's function)")
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        line = getattr(getattr(cls, "__code__", None), "co_firstlineno", 1)
        raise Ungradable(f"{shown}:{line}: {name} is not a torch.autograd.Function subclass")
    return cls


def line_in(e: BaseException, path: str) -> int:
    """The last line of `path` that the traceback of `e` passes through (1 if none)."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
             if os.path.abspath(f.filename) == os.path.abspath(path)]
    return (lines[-1] or 1) if lines else getattr(e, "lineno", None) or 1


# -- autograd inside backward -------------------------------------------------------------------

AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad", torch.autograd.backward:
            "torch.autograd.backward", torch.Tensor.backward: ".backward()"}


@dataclass
class Record:
    """What the submission's backward did: what it returned, whether it raised, where it
    called autograd itself."""
    path: str
    returned: list[Any] = field(default_factory=list)
    raised: BaseException | None = None
    autograd: dict[str, int] = field(default_factory=dict)  # call -> line in the submission


class Watch(TorchFunctionMode):
    """Records the autograd calls made while backward runs: torch.autograd.grad and
    .backward() reach __torch_function__ (they check has_torch_function, which a mode turns
    on), however the submission got hold of them (torch.func's transforms call
    torch.autograd.grad too)."""

    def __init__(self, record: Record, phase: str = "backward"):
        super().__init__()
        self.record, self.phase = record, phase

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if func in AUTOGRAD:
            self.record.autograd.setdefault(f"{AUTOGRAD[func]} in {self.phase}",
                                            line_now(self.record.path))
        return func(*args, **(kwargs or {}))


def line_now(path: str) -> int:
    """The line of `path` the stack is at now (0: none)."""
    frames = [f.lineno for f in traceback.extract_stack()
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    return (frames[-1] or 0) if frames else 0


@contextlib.contextmanager
def watching(record: Record, phase: str) -> Any:
    """Watch's mode; and where grad mode is off (forward; backward without create_graph),
    saved-tensor hooks: an op that saves a tensor for a backward there means the code built an
    autograd graph, which a mode switched off, an engine called directly, does not hide."""
    def pack(t: torch.Tensor) -> torch.Tensor:
        record.autograd.setdefault(f"an autograd graph built in {phase}",
                                   line_now(record.path))
        return t

    with contextlib.ExitStack() as stack:
        stack.enter_context(Watch(record, phase))
        if not torch.is_grad_enabled():
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
        yield


def watched(cls: type, record: Record) -> type:
    """A subclass of the submission's Function whose forward and backward are its own,
    watched (a forward may compute the derivative with autograd and save it for backward)."""
    original, forward = cls.backward, cls.forward

    def watched_forward(*args, **kwargs):
        with watching(record, "forward"):
            return forward(*args, **kwargs)

    def backward(ctx, *grads):
        try:
            with watching(record, "backward"):
                out = original(ctx, *grads)
        except BaseException as e:
            record.raised = e
            raise
        record.returned.append(out)
        return out
    return type(cls.__name__, (cls,), {"backward": staticmethod(backward),
                                       "forward": staticmethod(watched_forward),
                                       "__module__": cls.__module__})


# -- the hidden inputs ------------------------------------------------------------------------

def inputs(g: Grading, case: dict[str, list[int]], seed: int) -> dict[str, torch.Tensor]:
    """The inputs of one hidden case under one seed: float64 leaves."""
    gen = torch.Generator().manual_seed(seed)
    xs = {}
    for spec in g.inputs:
        shape = case[spec.name]
        if spec.low is None or spec.high is None:
            x = torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            x = torch.empty(shape, dtype=torch.float64).uniform_(spec.low, spec.high,
                                                                  generator=gen)
        for k in spec.avoid:
            x = k + (x - k).sign() * (x - k).abs().clamp(min=MARGIN)
        xs[spec.name] = x.requires_grad_(spec.requires_grad)
    return xs


def grad_output(shape: torch.Size, seed: int) -> torch.Tensor:
    """A random grad_output (never ones: a backward that forgets it would pass)."""
    gen = torch.Generator().manual_seed(seed + 7919)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


# -- the checks ---------------------------------------------------------------------------------

def grade(path: str, g: Grading, reference: Callable, given: type | None = None
          ) -> GradeResult:
    """The submission at `path` graded as `g` says, against `reference`; `given`: the class
    itself (a notebook's), `path` the file its backward's code is in."""
    cls = given or load(path, g.function)
    record = Record(path)
    fn = watched(cls, record).apply
    names = [i.name for i in g.inputs]
    wrt = [i.name for i in g.inputs if i.requires_grad]
    p = g.points
    runs = Test("runs: forward and backward run", p.runs)
    returns = Test("returns one gradient per input, of its input's shape", p.returns)
    grads = {k: Test(f"gradient of {k}", p.gradient) for k in wrt}
    second = Test("second derivative (backward's own backward)", p.second)
    tests = [runs, returns, *grads.values(), *([second] if p.second else [])]
    cases = list(itertools.product(g.hidden.shapes, g.hidden.seeds))
    result = GradeResult(path, tests, cases=len(cases), exercise=g.exercise)
    wrong: dict[str, list[dict[str, torch.Tensor]]] = {k: [] for k in wrt}
    returns_wrong, second_wrong = "", []
    refused = False
    for case, seed in cases:
        xs = inputs(g, case, seed)
        failed = grade_case(fn, reference, xs, seed, record, names, wrt)
        if isinstance(failed, str):
            if failed.startswith("returns: "):  # autograd refused it: no gradient to grade
                returns_wrong, refused = returns_wrong or failed.removeprefix("returns: "), True
                continue
            runs.output = f"{failed} (on a hidden case). Nothing else is graded."
            for t in tests[1:]:
                t.output = "not graded: the Function does not run"
            return flag(result, record, grads)
        said, failed = failed
        returns_wrong = returns_wrong or said
        for k in failed:
            wrong[k].append(xs)
        if p.second and not second_right(fn, reference, xs, seed, wrt):
            second_wrong.append(xs)
    runs.score, runs.output = runs.max_score, "forward and backward run on every hidden case"
    if returns_wrong:
        returns.output = returns_wrong
    else:
        returns.score, returns.output = returns.max_score, "one gradient per input, of its shape"
    for k, test in grads.items():
        if refused:
            test.output = "not graded: autograd refused what backward returned"
        elif not wrong[k]:
            test.score = test.max_score
            test.output = f"{k}'s gradient is right on all {len(cases)} hidden cases"
        else:
            d = diagnosis(fn, reference, wrong[k][0], k)
            test.kind = d.kind
            test.output = (f"{k}'s gradient differs from the right one on {len(wrong[k])} "
                           f"of {len(cases)} hidden cases." + hints(d, k, g.hints))
    if p.second:
        if not second_wrong:
            second.score, second.output = second.max_score, "right on every hidden case"
        else:
            d2 = second_against_numbers(fn, second_wrong[0])
            second.kind = d2.kind if d2 else "no simple pattern"
            second.output = (f"the second derivative differs from the reference's on "
                             f"{len(second_wrong)} of {len(cases)} hidden cases." +
                             (hints(d2, d2.input, g.hints) if d2 else ""))
    return flag(result, record, grads)


def grade_case(fn: Callable, reference: Callable, xs: dict[str, torch.Tensor], seed: int,
               record: Record, names: list[str], wrt: list[str]) -> str | tuple[str, list[str]]:
    """One hidden case: what failed to run (text; 'returns: ...' where autograd refused what
    backward returned); or what is wrong with what backward returned ('' if nothing) and the
    inputs whose gradients are wrong."""
    mine, theirs = fresh(xs), fresh(xs)
    try:
        with torch.enable_grad():
            out = fn(*mine.values())
    except (Exception, SystemExit, TooSlow) as e:
        return f"forward raised {one_line(e, 300)}"
    with torch.enable_grad():
        right = reference(*theirs.values())
    if not isinstance(out, torch.Tensor) or out.shape != right.shape or not agree(
            out.detach(), right.detach(), *REFERENCE_TOL):
        return ("forward gives other values than the statement's forward (it is given: "
                "leave it as it is)")
    go = grad_output(out.shape, seed)
    record.returned.clear()
    record.raised = None
    try:
        got = torch.autograd.grad(out, [mine[k] for k in wrt], go, allow_unused=True)
    except (Exception, SystemExit, TooSlow) as e:
        if record.raised is not None:
            if isinstance(record.raised, NotImplementedError):
                return "backward is not written yet: it raises NotImplementedError"
            return f"backward raised {one_line(record.raised, 300)}"
        said = returned_wrong(record.returned[0], xs, names) if record.returned else ""
        refused = f"autograd refused what backward returned: {one_line(e, 300, located=False)}"
        return f"returns: {said or refused}"
    expected = torch.autograd.grad(right, [theirs[k] for k in wrt], go, allow_unused=True)
    returned = record.returned[0] if record.returned else None
    return (returned_wrong(returned, xs, names),
            [k for k, a, b in zip(wrt, got, expected) if not same(a, b, *REFERENCE_TOL)])


def returned_wrong(returned: Any, xs: dict[str, torch.Tensor], names: list[str]) -> str:
    """What is wrong with the count or the shapes of what backward returned ('' if nothing)."""
    got = returned if isinstance(returned, tuple) else (returned,)
    if len(got) < len(names) or any(r is not None for r in got[len(names):]):
        return (f"backward returns {len(got)} value(s); forward has {len(names)} input(s) "
                f"({', '.join(names)}): one gradient (or None) each, in order")
    for k, r in zip(names, got):
        if r is not None and (not isinstance(r, torch.Tensor) or r.shape != xs[k].shape):
            what = f"shape {list(r.shape)}" if isinstance(r, torch.Tensor) else \
                type(r).__name__
            return f"{k}'s gradient has {what}; {k} has shape {list(xs[k].shape)}"
    return ""


def second_right(fn: Callable, reference: Callable, xs: dict[str, torch.Tensor], seed: int,
                 wrt: list[str]) -> bool:
    """Whether the backward's own backward is the reference's second derivative: the gradient
    of <gradients, v> for a random v, with respect to the inputs."""
    results = []
    for f in (fn, reference):
        leaves = fresh(xs)
        try:
            with torch.enable_grad():
                out = f(*leaves.values())
                go = grad_output(out.shape, seed)
                gs = torch.autograd.grad(out, [leaves[k] for k in wrt], go, create_graph=True,
                                         allow_unused=True)
                gen = torch.Generator().manual_seed(seed + 31)
                total = sum(((gr * torch.randn(gr.shape, generator=gen, dtype=gr.dtype)).sum()
                             for gr in gs if gr is not None and gr.requires_grad),
                            torch.zeros((), dtype=torch.float64))
                hs = torch.autograd.grad(total, [leaves[k] for k in wrt], allow_unused=True) \
                    if total.requires_grad else [None] * len(wrt)
        except Exception:
            return False
        results.append(hs)
    return all(same(a, b, *REFERENCE_TOL) for a, b in zip(*results))


# -- why: the lab's diagnosis, as hints ----------------------------------------------------------

def diagnosis(fn: Callable, reference: Callable, xs: dict[str, torch.Tensor],
              name: str) -> Diagnosis:
    """Why `name`'s gradient is wrong: the lab's diagnosis against the reference's autograd,
    with `name` tried first."""
    return against_reference(fn, reference, xs, first=name) or Diagnosis(
        "no simple pattern", f"{name}'s gradient differs with no simple pattern: compare the "
                             f"formula with the forward's derivative", "the output", name)


KINDS = {  # the diagnosis's kinds, as hint 2 names them without giving the fix away
    "sign": "the sign is wrong",
    "factor": "a constant factor is off",
    "not multiplied": "it does not use grad_output as it should (the chain rule)",
    "zero": "it is missing: None or zero where a gradient is needed",
    "one contribution missing": "a term is missing",
    "swapped": "it is another input's gradient: two gradients are swapped",
    "transposed": "a transpose is the wrong way round",
    "broadcast sum": "it does not sum over the dimensions the input was broadcast over",
    "some elements": "it is wrong only at some elements: a condition or a branch",
    "input for output": "it uses the input where the derivative needs the output",
    "inverted condition": "a condition is inverted",
    "transformed input": "the right formula at the wrong point",
    "shape": "its shape is wrong",
    "not finite": "it is NaN or inf where the right one is finite",
    "no simple pattern": "no simple pattern: compare your formula with the derivative",
}


def hints(d: Diagnosis, name: str, level: int) -> str:
    """The hint ladder, up to `level`: 1 which input, 2 the kind of mistake, 3 the fix."""
    ladder = [f"hint 1: it is {name}'s gradient that is wrong" +
              ("" if d.output == "the output" else f" (from {d.output})"),
              f"hint 2: the kind of mistake: {KINDS.get(d.kind, d.kind)}",
              f"hint 3: {d.says}"]
    return "".join(f"\n{h}" for h in ladder[:level])


def flag(result: GradeResult, record: Record, grads: dict[str, Test]) -> GradeResult:
    """A backward that called autograd: its gradients scored 0, and said, for the teacher."""
    if record.autograd:
        said = {k: v for k, v in record.autograd.items() if not k.startswith("an autograd")}
        calls = ", ".join(f"{call} (line {line})" if line else call  # the calls, if it named any
                          for call, line in (said or record.autograd).items())
        result.flagged = (f"FLAGGED for the teacher: the Function calls autograd itself: "
                          f"{calls}; its gradients are autograd's, not its own: they score 0")
        for t in grads.values():
            t.score = 0.0
            t.kind = "autograd inside backward"
            t.output = f"not scored: {result.flagged}"
    return result


def load_reference(g: Grading, grading_path: str) -> Callable:
    """grading.yaml's reference: a module, or a file relative to grading.yaml's folder."""
    from demos.lab.core.user_code import is_path, load_object

    module, _, attr = g.reference.rpartition(":")
    base = os.path.dirname(os.path.abspath(grading_path))
    if module and is_path(module, base) and not os.path.isabs(module):
        module = os.path.join(base, module)
    ref = load_object(f"{module}:{attr}", f"{grading_path}: reference")
    if not callable(ref):
        raise ConfigError(f"{grading_path}: reference: {g.reference} is not callable")
    return ref


def grade_file(file: str | type, grading: str | None = None, results: str | None = None
               ) -> GradeResult:
    """`autograd-demos grade FILE [--grading YAML] [--results JSON]` and `demos.grade`: the
    submission at `file` (or the Function class itself, grading then required) graded as
    `grading` (default: the grading.yaml beside it) says;
    results.json written where asked (a submission that cannot be graded: score 0, then
    Ungradable raised). A bad grading.yaml or reference is a ConfigError."""
    from demos.exercises import spec
    from demos.lab.core.files import dumps

    given = None
    if isinstance(file, type):  # a class, as a notebook defines it
        given = file
        if not issubclass(given, torch.autograd.Function):
            raise ConfigError(f"grade: {given.__name__} is not a torch.autograd.Function")
        if grading is None:
            raise ConfigError(f"grade: {given.__name__}: a class needs grading= (its "
                              f"exercise's grading.yaml)")
        file = getattr(getattr(given.backward, "__code__", None), "co_filename", "<class>")
    grading = grading or os.path.join(os.path.dirname(file) or ".", "grading.yaml")
    g = spec.read(grading)
    reference = load_reference(g, grading)
    try:
        try:
            with time_limit(TIME_LIMIT):
                result = grade(file, g, reference, given)
        except TooSlow:
            raise Ungradable(f"{file}: grading it took more than {TIME_LIMIT} s (a loop that "
                             f"does not end?)") from None
        if given is not None:
            result.file = given.__name__
    except Ungradable as e:
        if results:
            write_results(results, dumps({"score": 0.0, "output": f"cannot be graded: {e}",
                                          "tests": []}))
        raise
    if results:
        write_results(results, dumps(result.to_json()))
    return result


def write_results(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ConfigError(f"--results {path}: cannot write it: {e.strerror or e}") from None
