"""A standalone script that shows a support row's `differs`: torch's compiled transform giving
other numbers than eager torch, for one Function at fixed inputs. It holds the Function's own
source (with its module's imports and the classes it derives from), the inputs as literals, the
eager and the compiled call, and an assert: run alone, it fails where torch differs, and can be
pasted into a PyTorch bug report."""
from __future__ import annotations

import ast
import inspect
import sys
from typing import Any

import torch

from demos.lab.checks.gradients import Fixed


def script(case: dict[str, Any], name: str, row: str) -> str:
    """The reproduction of one `differs` row (support.versus_eager's `case`)."""
    fn = case["fn"]
    inner, fixed = getattr(fn, "__wrapped__", fn), getattr(fn, "fixed", {})
    owner = getattr(inner, "__self__", None)
    cls = owner if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) \
        else None
    source, call = definition(cls, inner)
    inputs = case["inputs"]
    n = len(inputs) + len(fixed)
    lines = [
        f"# {name}, support row {row}: torch.compile({case['transform']}) (backend "
        f"{case['backend']}) against eager {case['transform']}.",
        f"# Written by autograd-demos with torch {torch.__version__}, Python "
        f"{sys.version.split()[0]}. Run it alone: python repro_{name}_{row}.py; it fails "
        f"where they differ.",
        "import torch", "", source, "",
        f"inputs = [{', '.join(literal(v) for v in inputs.values())}]  "
        f"# {', '.join(inputs)}",
        f"FIXED = {{{', '.join(f'{i}: {value(f)}' for i, f in fixed.items())}}}  "
        f"# the arguments that are not differentiated, by position",
        "", "", "def call(*xs):",
        "    given = iter(xs)",
        f"    return {call}(*[FIXED[i] if i in FIXED else next(given) for i in range({n})])",
        "", ""]
    lines += TRANSFORMS[case["transform"]](case)
    lines += [
        "", "", "def flat(result):",
        "    if isinstance(result, torch.Tensor):",
        "        return [result.detach().double().flatten()]",
        "    return [t for r in result if isinstance(r, (torch.Tensor, tuple, list))",
        "            for t in flat(r)]", "", "",
        "eager, compiled = torch.cat(flat(eager)), torch.cat(flat(compiled))",
        "print('torch', torch.__version__)",
        "print('eager:   ', eager)",
        "print('compiled:', compiled)",
        "assert torch.allclose(eager, compiled, rtol=1e-7, atol=1e-9), (",
        f"    'torch.compile({case['transform']}) differs from eager: max abs difference '",
        "    f'{(eager - compiled).abs().max().item():.3g}')",
        "print('the same: torch no longer differs here')", ""]
    return "\n".join(lines)


def grad_lines(case: dict[str, Any]) -> list[str]:
    ws = ", ".join(literal(w) for w in case["weights"])
    return [
        f"weights = [{ws}]  # one per output: f is their weighted sum, one number", "", "",
        "def f(*xs):",
        "    outs = call(*xs)",
        "    outs = [o for o in (outs if isinstance(outs, tuple) else (outs,))",
        "            if isinstance(o, torch.Tensor)]",
        "    return sum((o * w).sum() for o, w in zip(outs, weights))", "", "",
        f"grad = torch.func.grad(f, argnums={case['argnums']!r})",
        "eager = grad(*inputs)",
        f"compiled = torch.compile(grad, backend={case['backend']!r})(*inputs)"]


def jvp_lines(case: dict[str, Any]) -> list[str]:
    ts = ", ".join(literal(t) for t in case["tangents"])
    return [
        f"tangents = [{ts}]", "", "",
        "def jvp(*args):",
        "    return torch.func.jvp(call, args[:len(inputs)], args[len(inputs):])", "", "",
        "eager = jvp(*inputs, *tangents)",
        f"compiled = torch.compile(jvp, backend={case['backend']!r})(*inputs, *tangents)"]


def vmap_lines(case: dict[str, Any]) -> list[str]:
    bs = ", ".join(literal(b) for b in case["batched"])
    return [
        f"batched = [{bs}]  # each input, three versions stacked", "",
        "eager = torch.func.vmap(call)(*batched)",
        f"compiled = torch.compile(torch.func.vmap(call), backend={case['backend']!r})"
        "(*batched)"]


TRANSFORMS = {"torch.func.grad": grad_lines, "torch.func.jvp": jvp_lines,
              "torch.func.vmap": vmap_lines}


def definition(cls: type | None, inner: Any) -> tuple[str, str]:
    """The Function's source (its module's imports, then its classes, bases first) and the
    expression that applies it; for what has no source here, an import from its file."""
    if cls is not None:
        try:
            chain = [c for c in reversed(cls.__mro__)
                     if c.__module__ == cls.__module__ and issubclass(c, torch.autograd.Function)]
            module = sys.modules.get(cls.__module__)
            imports = [i for i in imports_of(inspect.getsource(module)) if i != "import torch"] \
                if module else []
            return "\n".join([*imports, "", "", *("\n" + inspect.getsource(c)
                                                  for c in chain)]), f"{cls.__name__}.apply"
        except (OSError, TypeError):
            pass
    module = sys.modules.get(getattr(inner, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    what = getattr(inner, "__qualname__", None) or getattr(inner, "_qualname", "fn")
    if path:
        head = what.split(".")[0]
        return ("import importlib.util\n"
                f"spec = importlib.util.spec_from_file_location('source', {path!r})\n"
                "source = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(source)  # the Function's own file, as the run had it"
                f"\n{head} = source.{head}", what)
    return (f"# no source for {what} here: paste its definition in place of this line",
            what)


def imports_of(source: str) -> list[str]:
    """The top-level import statements of a module's source (not __future__'s)."""
    tree = ast.parse(source)
    return [ast.get_source_segment(source, node) or "" for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]


def literal(t: torch.Tensor) -> str:
    """A tensor as Python source: its values in full precision, and its dtype."""
    return f"torch.tensor({t.detach().cpu().tolist()!r}, dtype={t.dtype})"


def value(f: Fixed) -> str:
    v = f.value
    return literal(v) if isinstance(v, torch.Tensor) else repr(v)
