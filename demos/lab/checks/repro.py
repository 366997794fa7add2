"""A standalone script that shows a support row's `differs` (torch's compiled transform giving
other numbers than eager torch), runs with torch alone and never imports the lab: what it
holds, checks.md, "When torch is the one that differs"."""
from __future__ import annotations

import ast
import inspect
import math
import sys
import textwrap
from typing import Any

import torch

from demos.lab.core.tolerance import FLOAT64_TOL


def script(case: dict[str, Any], name: str, row: str) -> str:
    """The reproduction of one `differs` row (support.against_eager's `case`)."""
    fn = case["fn"]
    inner, fixed = getattr(fn, "__wrapped__", fn), getattr(fn, "fixed", {})
    owner = getattr(inner, "__self__", None)
    cls = owner if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) \
        else None
    source, call, missing = definition(cls, inner)
    futures = [line for line in source.splitlines() if line.startswith("from __future__ ")]
    body = [line for line in source.splitlines() if line not in futures]  # those go first
    inputs = case["inputs"]
    n = len(inputs) + len(fixed)
    given = []
    for i, f in fixed.items():
        try:
            given.append(f"{i}: {literal(f.value)}")
        except ValueError:
            missing.append(f"FIXED[{i}] (a {type(f.value).__name__}; None stands in for it)")
            given.append(f"{i}: None")
    lines = [
        f"# {name}, support row {row}: torch.compile({case['transform']}) (backend "
        f"{case['backend']}) against eager {case['transform']}.",
        f"# Written by autograd-demos with torch {torch.__version__}, Python "
        f"{sys.version.split()[0]}. Run it alone: python repro_{name}_{row}.py; it fails "
        f"where they differ.",
        *([f"# Not carried from the Function's code, to define here: "
            f"{', '.join(dict.fromkeys(missing))}"]
          if missing else []),
        *futures, "import torch", "", *body, "",
        f"inputs = [{', '.join(literal(v) for v in inputs.values())}]  "
        f"# {', '.join(inputs)}",
        f"FIXED = {{{', '.join(given)}}}  # the arguments that are not differentiated, by "
        f"position",
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
        "assert torch.allclose(eager, compiled, rtol={:g}, atol={:g}), (".format(*FLOAT64_TOL),
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


LAB = __name__.split(".")[0]  # this lab's package: a script of its own never imports it


def definition(cls: type | None, inner: Any) -> tuple[str, str, list[str]]:
    """The Function's definition as the script's source, the expression that applies it, and
    what could not be carried. Its module's source (its helpers and constants come with it),
    as `context` makes it a script's; a class made inside a function (a factory), its source
    after the module's, with the values it closes over; without the module's source, the
    class's, with what it uses."""
    init = getattr(inner, "_init_fn", None)  # a torch.library.custom_op: the user's function
    obj = init or cls or inner
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    name = (init.__name__ if init is not None else cls.__name__ if cls is not None
            else getattr(inner, "__qualname__", "fn"))
    call = f"{name}.apply" if cls is not None and init is None else name
    missing: list[str] = []
    body = context(module, missing) if module is not None else None
    if body is not None and (cls is None or "<locals>" not in cls.__qualname__):
        return body, call, missing
    try:
        own = textwrap.dedent(inspect.getsource(cls or obj))
    except (OSError, TypeError):
        return f"# no source for {name} here: paste its definition in place of this line", \
            call, missing
    used = uses(cls or obj, with_globals=body is None)
    return "\n\n".join([*([body] if body else []), *carried(used, missing), own]), call, missing


def context(module: Any, missing: list[str], seen: tuple[str, ...] = ()) -> str | None:
    """A module's source as a script of its own: without its `__main__` block, without the
    lab's imports (in a TYPE_CHECKING block too) and every statement that uses what they bind (a
    `check_function(...)` at a script's top), each import of the user's own code (relative,
    or of a module that is no installed one, `mine`) replaced by the values it bound
    (`carried`). None where there is no source."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    out, lab, lines, end = [], set(), source.splitlines(), 0
    for node in ast.parse(source).body:
        first, end = end, node.end_lineno or node.lineno  # its lines, and the blanks before
        bound = {n for t in ast.walk(node) for n in bound_names(t)} if not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else {node.name}
        names = [m for n in ast.walk(node) for m in ([n.module or ""] if isinstance(
            n, ast.ImportFrom) else [a.name for a in n.names] if isinstance(n, ast.Import) else [])]
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        if any(n.split(".")[0] == LAB for n in names) or lab & {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
            lab |= bound  # the lab's, and what runs it
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                missing.append(node.name)  # a definition that uses the lab: to write by hand
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and (
                getattr(node, "level", 0) or any(mine(sys.modules.get(n)) for n in names)):
            here = vars(module)
            missing += [n for n in sorted(bound) if n not in here]  # `*`, or never bound
            out += carried({n: here[n] for n in sorted(bound) if n in here}, missing,
                           (*seen, module.__name__))
            continue
        out.append("\n".join(lines[first:end]))
    return "\n".join(out)


def bound_names(node: ast.AST) -> list[str]:
    """The names a statement's part binds: an import's, an assignment's targets."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return [node.id] if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) else []


def mine(module: Any) -> bool:
    """Whether `module` is the user's own code, which a script of its own cannot import: a file
    outside Python's and its packages' folders (as torch, math and numpy are inside them)."""
    path = getattr(module, "__file__", None) or ""
    return bool(path) and not path.startswith((sys.prefix, sys.base_prefix,
                                               *(p for p in sys.path if "-packages" in p)))


def carried(values: dict[str, Any], missing: list[str], seen: tuple[str, ...] = ()) -> list[str]:
    """Source that binds each name of `values` to its value in a script of its own: a literal;
    an import of an installed module or of what it holds; a function's or class's source, with
    what it uses; a module of the user's, made from its source. A name none of these can carry
    goes to `missing`."""
    out = []
    for name, value in values.items():
        try:
            out.append(f"{name} = {literal(value)}")
            continue
        except ValueError:
            pass
        where = getattr(value, "__module__", None) or ""
        qualname = getattr(value, "__qualname__", "")
        if inspect.ismodule(value) and not mine(value):
            out.append(f"import {value.__name__}" + (
                f" as {name}" if value.__name__ != name else ""))
        elif inspect.ismodule(value) and value.__name__ not in seen:
            code = context(value, missing, (*seen, value.__name__))
            if code is None:
                missing.append(f"{name} (the module {value.__name__}: no source)")
                continue
            out.append(f"{name} = type(torch)({value.__name__!r})  # a module of yours\n"
                       f"exec({code!r}, {name}.__dict__)")
        elif where and qualname and "<" not in qualname and "." not in qualname and \
                not mine(sys.modules.get(where)) and where.split(".")[0] != LAB:
            out.append(f"from {where} import {qualname}" + (
                f" as {name}" if qualname != name else ""))
        elif inspect.isfunction(value) or inspect.isclass(value):
            try:
                own = textwrap.dedent(inspect.getsource(value))
            except (OSError, TypeError):
                missing.append(f"{name} (no source)")
                continue
            out += carried({k: v for k, v in uses(value).items() if k != name}, missing, seen)
            out.append(own + (f"\n{name} = {value.__name__}" if value.__name__ != name else ""))
        else:
            missing.append(f"{name} ({type(value).__name__})")
    return out


def uses(obj: Any, with_globals: bool = True) -> dict[str, Any]:
    """What a function, or a class's methods and bases, use from outside: the values they close
    over, and with `with_globals` the globals they name (builtins aside)."""
    functions = [inspect.unwrap(getattr(v, "__func__", v)) for v in
                 (vars(obj).values() if inspect.isclass(obj) else [obj])]
    found: dict[str, Any] = {}
    for f in filter(inspect.isfunction, functions):
        names = inspect.getclosurevars(f)
        found.update(names.nonlocals)
        if with_globals:
            found.update(names.globals)
    if inspect.isclass(obj) and with_globals:
        found.update({b.__name__: b for b in obj.__bases__ if mine(sys.modules.get(b.__module__))})
    return found


def literal(v: Any) -> str:
    """A value as Python source, for values that have one (ValueError for others): numbers,
    text, bytes, None, torch dtypes, tensors (in full precision, with their dtype) and lists,
    tuples, sets and dicts of them; nan and inf as float("nan"), float("inf"), wherever a float
    is, and nowhere inside text."""
    if isinstance(v, torch.Tensor):
        return f"torch.tensor({literal(v.detach().cpu().tolist())}, dtype={v.dtype})"
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    if isinstance(v, complex):
        return f"complex({literal(v.real)}, {literal(v.imag)})"
    if type(v) in (bool, int, float, str, bytes, type(None)) or isinstance(v, torch.dtype):
        return repr(v)
    if type(v) in (list, tuple) or type(v) in (set, frozenset) and v:
        items = ", ".join(literal(x) for x in v) + ("," if type(v) is tuple and len(v) == 1
                                                    else "")
        return {list: f"[{items}]", tuple: f"({items})"}.get(type(v), f"{{{items}}}")
    if type(v) is dict:
        return "{" + ", ".join(f"{literal(k)}: {literal(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"no literal for a {type(v).__name__}")
