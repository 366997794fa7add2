"""Mutation operators for a custom Function's backward, applied mechanically to its source: the
backward is read (inspect.getsource), parsed (ast.parse), changed at one site by the operator's
NodeTransformer, written back (ast.unparse) and executed into a fresh class, the right Function
with that backward in place of its own. tests/bench_diagnosis.py asks the lab why each mutant
is wrong.

Each operator finds every site it applies to in the backward (`Operator.sites`), each with the
diagnosis kinds that name its mistake (`Site.expect`); `Operator.alike` adds the kinds the
numbers cannot tell apart from it at some sites, each with where.
"""
from __future__ import annotations

import ast
import copy
import inspect
import linecache
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterator

# what the lab's diagnosis says (a kind, or a kind and words its sentence must hold)
Kind = tuple[str, str]  # (kind, "" or a phrase of `says`)


def kinds(*names: str | Kind) -> tuple[Kind, ...]:
    return tuple(n if isinstance(n, tuple) else (n, "") for n in names)


def named(expect: tuple[Kind, ...], kind: str | None, says: str) -> bool:
    """Whether a diagnosis (kind, says) is one of `expect`."""
    return any(kind == k and phrase in says for k, phrase in expect)


def verdict(op: type[Operator], site: Site, kind: str | None, says: str) -> str:
    """'right' (a kind the site expects), 'alike' (one its numbers may not tell apart from
    it: op.alike) or 'wrong'."""
    if named(site.expect, kind, says):
        return "right"
    return "alike" if named(tuple(k for k, _ in op.alike), kind, says) else "wrong"


# -- the backward, read ---------------------------------------------------------------------------


@dataclass
class Backward:
    """A Function's backward as a tree, with what the operators need to know of it: its
    incoming gradients (`grads`), the names it unpacks from ctx.saved_tensors (`saved`), which
    of them are inputs of forward (floating-point ones: `inputs`) and which its output
    (`outputs`), and its nodes by their place in ast.walk's order (the same in a deep copy)."""
    function: type
    tree: ast.Module
    fn: ast.FunctionDef
    grads: list[str]
    saved: list[str]
    inputs: list[str]
    outputs: list[str]
    nodes: list[ast.AST] = field(default_factory=list)

    def at(self, node: ast.AST) -> int:
        return next(i for i, n in enumerate(self.nodes) if n is node)

    def line(self, node: ast.AST) -> int:
        """The line of `node` in backward's source, its `def` line 1."""
        return getattr(node, "lineno", 0) - self.fn.lineno + 1

    def loads(self, names: set[str] | list[str]) -> list[ast.Name]:
        return [n for n in self.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                and n.id in names]

    def returns(self) -> list[tuple[ast.Return, list[ast.expr]]]:
        """Each return statement with the gradients it returns (None constants left out)."""
        found = []
        for r in (n for n in self.nodes if isinstance(n, ast.Return) and n.value is not None):
            elts = r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]
            found.append((r, [e for e in elts if not is_none(e)]))
        return found

    def definitions(self, name: str) -> list[ast.stmt]:
        """The statements that assign `name` (wholly, in part or in place)."""
        out = []
        for n in self.nodes:
            targets = n.targets if isinstance(n, ast.Assign) else \
                [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
            if any(name in stored(t) for t in targets):
                out.append(n)
        return out


def is_none(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def stored(target: ast.AST) -> set[str]:
    """The names an assignment's target changes: `a`, `a, b`, `a[i]` (a, in part)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(stored(t) for t in target.elts))
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return stored(target.value)
    return set()


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def method_tree(method: Any) -> tuple[ast.Module, ast.FunctionDef]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return tree, fn


def read(function: type, floating: set[str]) -> Backward:
    """`function`'s backward, read; `floating`: the names of forward's floating-point inputs
    (a gradient flows to them; an index does not)."""
    tree, fn = method_tree(function.backward)
    fn.decorator_list = []
    _, fwd = method_tree(function.forward)
    params = [a.arg for a in fwd.args.args[1:]]
    returned = {n.value.id for n in ast.walk(fwd) if isinstance(n, ast.Return)
                and isinstance(n.value, ast.Name)}
    kept = next(([a.id if isinstance(a, ast.Name) else "" for a in n.args]
                 for n in ast.walk(fwd) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "save_for_backward"),
                [])
    saved, inputs, outputs = [], [], []
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and \
                n.value.attr == "saved_tensors":
            target = n.targets[0]
            names = [t.id if isinstance(t, ast.Name) else "" for t in
                     (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]
            for name, theirs in zip(names, kept):
                if not name:
                    continue
                saved.append(name)
                if theirs in params and params[params.index(theirs)] in floating:
                    inputs.append(name)
                elif theirs in returned:
                    outputs.append(name)
    grads = [a.arg for a in fn.args.args[1:]]
    b = Backward(function, tree, fn, grads, saved, inputs, outputs)
    b.nodes = list(ast.walk(fn))
    return b


# -- the operators --------------------------------------------------------------------------------


@dataclass
class Site:
    """Where an operator applies and how: `what` says it (`line 2: -grad_input`), `payload` is
    the operator's own (node indices, a variant), `expect` the kinds that name it."""
    what: str
    payload: Any
    expect: tuple[Kind, ...]
    key: str = ""  # mutants of one key are variants of one change (a dim, the other dims)


class Operator(ast.NodeTransformer):
    """A mutation operator: `sites` finds where it applies in a backward; an instance made with
    one site's payload is the NodeTransformer that makes that change in a copy of the tree."""
    name = ""  # the table's row
    does = ""  # what it does, in a few words
    expect: tuple[Kind, ...] = ()
    # kinds the numbers cannot tell apart from the mistake at some sites, each with where
    alike: tuple[tuple[Kind, str], ...] = ()
    second = False  # its mistake shows in second derivatives only

    def __init__(self, b: Backward, payload: Any):
        self.b, self.payload = b, payload
        self.index: dict[int, int] = {}

    @classmethod
    def sites(cls, b: Backward) -> list[Site]:
        raise NotImplementedError

    def apply(self) -> ast.FunctionDef:
        """The backward with this site changed (a new tree)."""
        fn = copy.deepcopy(self.b.fn)
        self.index = {id(n): i for i, n in enumerate(ast.walk(fn))}
        fn = self.visit(fn)
        return ast.fix_missing_locations(fn)

    def node_at(self, node: ast.AST) -> int:
        return self.index.get(id(node), -1)


def returned_gradients(b: Backward) -> Iterator[tuple[int, int, ast.expr]]:
    """(the return's index, the element's place in it, the element) of each gradient returned."""
    for r, elts in b.returns():
        values = r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]
        for e in elts:
            yield b.at(r), next(i for i, v in enumerate(values) if v is e), e


class OnReturn(Operator):
    """An operator on one returned gradient: the payload is (return index, place, variant)."""

    def change(self, e: ast.expr, variant: Any) -> ast.expr:
        raise NotImplementedError

    def visit_Return(self, node: ast.Return) -> ast.Return:
        self.generic_visit(node)
        at, place, variant = self.payload
        if self.node_at(node) != at:
            return node
        if isinstance(node.value, ast.Tuple):
            node.value.elts[place] = self.change(node.value.elts[place], variant)
        else:
            node.value = self.change(node.value, variant)
        return node


class Sign(OnReturn):
    name = "sign"
    does = "a returned gradient negated"
    expect = kinds("sign")

    @classmethod
    def sites(cls, b):
        return [Site(f"line {b.line(e)}: -({ast.unparse(e)})", (r, i, None), cls.expect)
                for r, i, e in returned_gradients(b)]

    def change(self, e, variant):
        return ast.UnaryOp(ast.USub(), e)


def chain(b: Backward, e: ast.expr, seen: frozenset[str] = frozenset()) -> list[ast.expr]:
    """The factors of `e` as a product: a * b / c, -a (and those of a name assigned once and
    used here alone); each a factor of the whole gradient."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.Div)):
        return chain(b, e.left, seen) + chain(b, e.right, seen)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return chain(b, e.operand, seen)
    if isinstance(e, ast.Name) and e.id not in seen and len(b.loads([e.id])) == 1:
        defs = b.definitions(e.id)  # used here alone: its factors are the gradient's
        if len(defs) == 1 and isinstance(defs[0], ast.Assign) and \
                isinstance(defs[0].targets[0], ast.Name):
            return chain(b, defs[0].value, seen | {e.id})
    return [e]


def literal(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and type(e.value) in (int, float)


class Factor(OnReturn):
    """A constant factor: a returned gradient times 2 or 1/2, or a literal that multiplies the
    whole gradient doubled (1.5 -> 3.0; a divisor's: 1/2)."""
    name = "a constant factor"
    does = "a returned gradient times 2 or 1/2, or a literal that multiplies it doubled"
    expect = kinds("factor")

    @classmethod
    def sites(cls, b):
        found = [Site(f"line {b.line(e)}: {c} * ({ast.unparse(e)})", (r, i, c), cls.expect)
                 for r, i, e in returned_gradients(b) for c in (2, 0.5)]
        constants = {b.at(f): f for _, _, e in returned_gradients(b) for f in chain(b, e)
                     if literal(f)}
        found += [Site(f"line {b.line(f)}: the literal {f.value!r} -> {f.value * 2!r}",  # type: ignore[attr-defined]
                       (-1, -1, at), cls.expect) for at, f in sorted(constants.items())]
        return found

    def change(self, e, variant):
        return ast.BinOp(ast.Constant(variant), ast.Mult(), e)

    def visit_Constant(self, node):
        if self.payload[0] == -1 and self.node_at(node) == self.payload[2]:
            return ast.Constant(node.value * 2)
        return node


class NoneFor(OnReturn):
    name = "None for a gradient"
    does = "a returned gradient made None"
    expect = kinds("zero")

    @classmethod
    def sites(cls, b):
        return [Site(f"line {b.line(e)}: None for {ast.unparse(e)}", (r, i, None), cls.expect)
                for r, i, e in returned_gradients(b)]

    def change(self, e, variant):
        return ast.Constant(None)


class Swap(Operator):
    name = "gradients swapped"
    does = "two returned gradients swapped"
    expect = kinds("swapped")

    @classmethod
    def sites(cls, b):
        found = []
        for r, _ in b.returns():
            values = r.value.elts if isinstance(r.value, ast.Tuple) else []
            places = [i for i, v in enumerate(values) if not is_none(v)]
            found += [Site(f"line {b.line(r)}: {ast.unparse(values[i])} and "
                           f"{ast.unparse(values[j])} swapped", (b.at(r), i, j), cls.expect)
                      for k, i in enumerate(places) for j in places[k + 1:]]
        return found

    def visit_Return(self, node):
        self.generic_visit(node)
        at, i, j = self.payload
        if self.node_at(node) == at:
            elts = node.value.elts  # type: ignore[union-attr]
            elts[i], elts[j] = elts[j], elts[i]
        return node


def depends(b: Backward, e: ast.expr) -> set[int]:
    """The indices of the nodes a returned gradient is computed from: `e` and the statements
    that assign the names it uses, and theirs (a backward slice)."""
    want, done, found = names_in(e), set(), {b.at(n) for n in ast.walk(e)}
    while want - done:
        name = (want - done).pop()
        done.add(name)
        for stmt in b.definitions(name):
            found |= {b.at(n) for n in ast.walk(stmt)}
            want |= {n.id for n in ast.walk(stmt)  # what it reads, not what else it assigns
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return found


class Drop(Operator):
    """grad_output dropped: each use of an incoming gradient replaced by ones
    (torch.ones_like(grad_output)), in the whole backward, and, where it returns several
    gradients, in what one of them is computed from."""
    name = "grad_output dropped"
    does = ("grad_output made torch.ones_like(grad_output), in the whole backward or in what "
              "one returned gradient is computed from")
    expect = kinds("not multiplied")
    alike = ((("zero", ""), "where the local derivative gives zero for grad_output = ones "
              "(softmax's y (1 - sum y)), zero does not change with grad_output either"),)

    @classmethod
    def sites(cls, b):
        found, every = [], {b.at(n) for n in b.loads(b.grads)}
        if every:
            found.append(Site(f"{', '.join(b.grads)} dropped", frozenset(every), cls.expect))
        gradients = list(returned_gradients(b))
        if len(gradients) > 1:
            for _, _, e in gradients:
                these = frozenset(every & depends(b, e))
                if these and these != every and all(s.payload != these for s in found):
                    found.append(Site(f"line {b.line(e)}: {', '.join(b.grads)} dropped from "
                                      f"{ast.unparse(e)}", these, cls.expect))
        return found

    def visit_Name(self, node):
        if self.node_at(node) in self.payload:
            return ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "ones_like", ast.Load()),
                            [ast.Name(node.id, ast.Load())], [])
        return node


TRANSPOSES = {"t", "transpose"}
PRODUCTS = {"mm", "matmul", "bmm", "mv"}


def transposed(e: ast.AST) -> ast.expr | None:
    """What `e` transposes, where it is a transpose (a.t(), a.transpose(i, j), a.T, a.mT,
    torch.t(a), torch.transpose(a, i, j))."""
    if isinstance(e, ast.Attribute) and e.attr in ("T", "mT") and isinstance(e.ctx, ast.Load):
        return e.value
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
            e.func.attr in TRANSPOSES:
        if isinstance(e.func.value, ast.Name) and e.func.value.id == "torch" and e.args:
            return e.args[0]
        return e.func.value
    return None


def operands(e: ast.AST) -> list[tuple[str, int]]:
    """A matrix product's operands, as (field, position): a @ b, a.mm(b), torch.mm(a, b)."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.MatMult):
        return [("left", -1), ("right", -1)]
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in PRODUCTS:
        if isinstance(e.func.value, ast.Name) and e.func.value.id == "torch":
            return [("args", 0), ("args", 1)]
        return [("receiver", -1), ("args", 0)]
    return []


def operand(e: ast.AST, where: tuple[str, int]) -> ast.expr:
    name, i = where
    if name == "receiver":
        return e.func.value  # type: ignore[attr-defined]
    return getattr(e, name) if i < 0 else getattr(e, name)[i]


class Transpose(Operator):
    """An operand transposed (a matrix product's operand gets .transpose(-1, -2)) or left
    untransposed (an existing transpose removed)."""
    name = "transposed or untransposed"
    does = "a matrix product's operand transposed, or a transpose removed"
    expect = kinds("transposed", ("transformed input", "transposed"))

    @classmethod
    def sites(cls, b):
        found = []
        for n in b.nodes:
            if transposed(n) is not None:
                found.append(Site(f"line {b.line(n)}: {ast.unparse(n)} -> "
                                  f"{ast.unparse(transposed(n))}", (b.at(n), None), cls.expect))
            for where in operands(n):
                o = operand(n, where)
                if transposed(o) is None:
                    found.append(Site(f"line {b.line(n)}: {ast.unparse(o)} transposed in "
                                      f"{ast.unparse(n)}", (b.at(n), where), cls.expect))
        return found

    def generic_visit(self, node):
        node = super().generic_visit(node)
        at, where = self.payload
        if self.node_at(node) != at:
            return node
        if where is None:
            return transposed(node)
        name, i = where
        new = ast.Call(ast.Attribute(operand(node, where), "transpose", ast.Load()),
                       [ast.Constant(-1), ast.Constant(-2)], [])
        if name == "receiver":
            node.func.value = new  # type: ignore[attr-defined]
        elif i < 0:
            setattr(node, name, new)
        else:
            getattr(node, name)[i] = new
        return node


def call_name(e: ast.AST) -> str:
    if isinstance(e, ast.Call):
        if isinstance(e.func, ast.Attribute):
            return e.func.attr
        if isinstance(e.func, ast.Name):
            return e.func.id
    return ""


def is_torch_function(e: ast.Call) -> bool:
    return isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) and \
        e.func.value.id in ("torch", "F")


class MeanForSum(Operator):
    name = "mean for sum"
    does = ".sum( made .mean("
    expect = kinds("factor")  # of 1/k: its sentence says the mean over k elements too

    @classmethod
    def sites(cls, b):
        return [Site(f"line {b.line(n)}: {ast.unparse(n)} -> mean", b.at(n), cls.expect)
                for n in b.nodes if call_name(n) == "sum"]

    def visit_Call(self, node):
        self.generic_visit(node)
        if self.node_at(node) == self.payload:
            if isinstance(node.func, ast.Attribute):
                node.func.attr = "mean"
            else:
                node.func.id = "mean"  # type: ignore[attr-defined]
        return node


REDUCTIONS = {"sum", "mean", "cumsum", "cumprod", "prod", "amax", "amin", "logsumexp",
              "softmax", "log_softmax", "norm", "var", "std"}
DIMS = (0, 1, -1, -2)


def int_value(e: ast.AST) -> int | None:
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and \
            isinstance(e.operand, ast.Constant) and type(e.operand.value) is int:
        return -e.operand.value
    return None


def dim_argument(e: ast.Call) -> tuple[str, int] | None:
    """Where a reduction's dim is given as an int: ('keyword', i) or ('args', i)."""
    for i, k in enumerate(e.keywords):
        if k.arg == "dim" and int_value(k.value) is not None:
            return ("keyword", i)
    i = 1 if is_torch_function(e) else 0
    if len(e.args) > i and int_value(e.args[i]) is not None:
        return ("args", i)
    return None


class WrongDim(Operator):
    """A reduction over another dim: each of 0, 1, -1, -2 other than the one given."""
    name = "reduction over the wrong dim"
    does = ("a reduction's dim made each of 0, 1, -1, -2 (at one site, a behaviour seen "
              "already, or the same dim spelled otherwise, counted once)")
    expect = kinds("shape")
    alike = ((("transposed", ""), "where a square tensor's other dim gives the right one "
              "transposed"),)

    @classmethod
    def sites(cls, b):
        found = []
        for n in b.nodes:
            if call_name(n) in REDUCTIONS and dim_argument(n):  # type: ignore[arg-type]
                where = dim_argument(n)  # type: ignore[arg-type]
                now = int_value(n.keywords[where[1]].value if where[0] == "keyword"  # type: ignore
                                else n.args[where[1]])  # type: ignore[attr-defined]
                found += [Site(f"line {b.line(n)}: {ast.unparse(n)}, dim {now} -> {d}",
                               (b.at(n), where, d), cls.expect, key=f"dim@{b.at(n)}")
                          for d in DIMS if d != now]
        return found

    def visit_Call(self, node):
        self.generic_visit(node)
        at, (kind, i), d = self.payload
        if self.node_at(node) == at:
            value = ast.Constant(d) if d >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-d))
            if kind == "keyword":
                node.keywords[i].value = value
            else:
                node.args[i] = value
        return node


class Rename(Operator):
    """Each use of one saved name replaced by an expression of another (payload: the name,
    the replacement's source)."""

    def visit_Name(self, node):
        name, new = self.payload
        if node.id == name and isinstance(node.ctx, ast.Load):
            return ast.parse(new, mode="eval").body
        return node


class InputForOutput(Rename):
    """The input used where the saved output is meant, and the output where the input is
    (where backward unpacks both)."""
    name = "input for output (and back)"
    does = ("the saved input used where the saved output is meant, and back (where backward "
              "unpacks both)")
    expect = kinds("input for output", ("transformed input", "in place of"))

    @classmethod
    def sites(cls, b):
        found = []
        for x in b.inputs:
            for y in b.outputs:
                found.append(Site(f"{x} where {y} is meant", (y, x), kinds("input for output")))
                found.append(Site(f"{y} where {x} is meant", (x, y),
                                  kinds(("transformed input", "in place of"))))
        return found


class AtMinus(Rename):
    """The derivative at a transformed input: each use of a saved input x as -x."""
    name = "derivative at -x"
    does = "each use of a saved input x made -x"
    expect = kinds(("transformed input", "at -"))
    alike = ((("sign", ""), "where the derivative is odd in x, or linear in it (a product's)"),
             (("inverted condition", ""), "where it is a step (ReLU's at -x is its condition "
              "inverted)"))

    @classmethod
    def sites(cls, b):
        return [Site(f"-{x} for {x}", (x, f"(-{x})"), cls.expect)
                for x in b.inputs if b.loads([x])]


class Detached(Rename):
    """A saved tensor detached: each use of it as x.detach() (the first derivative is the
    same; the second loses what flows through it)."""
    name = "a saved tensor detached"
    does = "each use of a saved tensor made .detach() (second derivatives alone)"
    expect = kinds("zero", "one contribution missing")
    second = True

    @classmethod
    def sites(cls, b):
        return [Site(f"{x}.detach() for {x}", (x, f"{x}.detach()"), cls.expect)
                for x in b.saved if b.loads([x])]


INVERSE = {ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
           ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
           ast.In: ast.NotIn, ast.NotIn: ast.In}


class Invert(Operator):
    """A condition inverted: a comparison (> for <=, is for is not), or an if's test that is
    none (`not` added)."""
    name = "condition inverted"
    does = ("a comparison inverted (> for <=, is for is not), or `not` added to an if's "
              "test")
    expect = kinds("inverted condition", "some elements")
    alike = ((("zero", ""), "where it guards a whole gradient (if ctx.needs_input_grad[i]: "
              "None)"),
             (("transformed input", "at -"), "where the step has two values (leaky ReLU's "
              "condition inverted is its derivative at -x)"))

    @classmethod
    def sites(cls, b):
        found = [Site(f"line {b.line(n)}: {ast.unparse(n)} inverted", b.at(n), cls.expect)
                 for n in b.nodes if isinstance(n, ast.Compare) and len(n.ops) == 1]
        found += [Site(f"line {b.line(n)}: if not ({ast.unparse(n.test)})", b.at(n.test),
                       cls.expect)
                  for n in b.nodes if isinstance(n, (ast.If, ast.IfExp))
                  and not isinstance(n.test, ast.Compare)]
        return found

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if self.node_at(node) != self.payload:
            return node
        if isinstance(node, ast.Compare):
            node.ops = [INVERSE[type(node.ops[0])]()]
            return node
        return ast.UnaryOp(ast.Not(), node)


OPERATORS: list[type[Operator]] = [Sign, Factor, Drop, Transpose, Swap, MeanForSum, WrongDim,
                                   InputForOutput, AtMinus, NoneFor, Detached, Invert]


# -- the mutants ----------------------------------------------------------------------------------


@dataclass
class Mutant:
    """A Function with one mutated backward: `function` (a subclass of the right one),
    `source` (its backward's), the operator and the site."""
    function: type
    operator: type[Operator]
    site: Site
    source: str


def mutants(function: type, floating: set[str], name: str = "") -> Iterator[Mutant]:
    """Every mutant of `function`'s backward, operator by operator, site by site; a change
    that leaves the source as it was is none."""
    b = read(function, floating)
    original = ast.unparse(b.fn)
    module = inspect.getmodule(function)
    for op in OPERATORS:
        for k, site in enumerate(op.sites(b)):
            fn = op(b, site.payload).apply()
            source = ast.unparse(fn)
            if source == original:
                continue
            tag = f"{name or function.__name__}: {op.name} #{k}"
            yield Mutant(build(function, source, module, tag, f"{op.__name__}{k}"), op, site,
                         source)


def build(function: type, source: str, module: Any, tag: str, suffix: str) -> type:
    """A fresh class: `function` with the backward `source` (exec'd among its module's
    globals, its lines kept in linecache for tracebacks)."""
    filename = f"<mutant {tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(vars(module)) if module else {}
    exec(compile(source, filename, "exec"), namespace)
    backward = namespace["backward"]
    name = f"{function.__name__}_{suffix}"
    return type(name, (function,), {"backward": staticmethod(backward),
                                    "__module__": "tests.mutants.generated",
                                    "__qualname__": name, "__doc__": tag})
