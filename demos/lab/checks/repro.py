"""A standalone script that shows a support row's `differs`: torch's compiled transform giving
other numbers than eager torch, for one Function at fixed inputs. It holds the Function's own
source (with its module's imports and the classes it derives from), the inputs as literals, the
eager and the compiled call, and an assert: run alone, it fails where torch differs, and can be
pasted into a PyTorch bug report."""
from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap
from typing import Any

import torch


def script(case: dict[str, Any], name: str, row: str) -> str:
    """The reproduction of one `differs` row (support.against_eager's `case`)."""
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
        f"FIXED = {{{', '.join(f'{i}: {literal(f.value)}' for i, f in fixed.items())}}}  "
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
    """The Function's definition as the script's source, and the expression that applies it.
    Its whole module's source where that stands alone (its helpers and constants come with
    it); where the module imports neighbours of its folder (or relatively), its own file loaded
    by path, its folder on sys.path; a class defined inside a function, its source alone."""
    init = getattr(inner, "_init_fn", None)  # a torch.library.custom_op: the user's function
    module = sys.modules.get(getattr(init or cls or inner, "__module__", "") or "")
    name = (init.__name__ if init is not None else cls.__name__ if cls is not None
            else getattr(inner, "__qualname__", "fn"))
    call = f"{name}.apply" if cls is not None and init is None else name
    path = getattr(module, "__file__", None)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        source = ""
    nested = cls is not None and "<locals>" in cls.__qualname__
    if source and not nested and standalone(source, os.path.dirname(path or "")):
        return without_main(source), call
    if path and not nested:
        return ("import importlib.util, os, sys\n"
                f"folder = {os.path.dirname(path)!r}  # the Function's file imports from its "
                "folder: load it from there\n"
                "sys.path.insert(0, folder)\n"
                f"spec = importlib.util.spec_from_file_location('source', {path!r})\n"
                "source = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(source)\n"
                f"{name} = source.{name}"), call
    if cls is not None:
        try:
            return textwrap.dedent(inspect.getsource(cls)), call
        except (OSError, TypeError):
            pass
    return f"# no source for {name} here: paste its definition in place of this line", call


def standalone(source: str, folder: str) -> bool:
    """Whether a module's source runs alone: no relative import, no import of a module that
    is a file or folder beside it."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or 0) > 0:
            return False
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for n in names:
            top = n.split(".")[0]
            if folder and top and (os.path.exists(os.path.join(folder, f"{top}.py"))
                                   or os.path.isdir(os.path.join(folder, top))):
                return False
    return True


def without_main(source: str) -> str:
    """A module's source without its `if __name__ == "__main__":` block (and __future__)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in reversed(tree.body):
        main = isinstance(node, ast.If) and "__main__" in (ast.get_source_segment(
            source, node.test) or "")
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if main or future:
            del lines[node.lineno - 1:node.end_lineno]
    return "\n".join(lines)


def literal(v: Any) -> str:
    """A value as Python source, nan and inf spelled as Python reads them: a tensor's values in
    full precision, with its dtype."""
    if isinstance(v, torch.Tensor):
        return f"torch.tensor({literal(v.detach().cpu().tolist())}, dtype={v.dtype})"
    return re.sub(r"\b(nan|inf)\b", r"float('\1')", repr(v))
