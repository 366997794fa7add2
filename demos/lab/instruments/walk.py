"""The graph walk: the nodes that backward() will visit, written out one by one (explain.txt;
demos/docs/output.md). Call it before backward(), which frees the saved tensors (unless
retain_graph=True)."""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Mapping, Sequence

import torch

LEGEND = {
    "AccumulateGrad": "a leaf's gradient sink: adds the incoming gradient into the leaf's .grad "
                      "(its .variable is the leaf tensor itself)",
    "AddBackward": "backward of a + b: passes the gradient to both inputs unchanged",
    "SubBackward": "backward of a - b: the gradient to a, its negative to b",
    "MulBackward": "backward of a * b: grad * b to a, grad * a to b (so it saves a and b)",
    "DivBackward": "backward of a / b: grad / b to a, -grad * a / b^2 to b",
    "PowBackward": "backward of x ** n: grad * n * x^(n-1) (saves x)",
    "ExpBackward": "backward of exp(x): grad * exp(x) (saves the result)",
    "NegBackward": "backward of -x: the negated gradient",
    "SumBackward": "backward of sum(): spreads the gradient back to every element",
    "MeanBackward": "backward of mean(): spreads the gradient / n to every element",
    "MmBackward": "backward of a @ b (2-D): grad @ b.T to a, a.T @ grad to b",
    "AddmmBackward": "backward of bias + input @ weight.T (what nn.Linear computes)",
    "TBackward": "backward of a transpose: transposes the gradient back",
    "ReluBackward": "backward of relu: passes the gradient where the input was > 0",
    "ClampMinBackward": "backward of clamp(min=m): passes the gradient where the input was >= m",
    "ConvolutionBackward": "backward of a convolution: grads for its input, weight and bias",
    "MaxPool2DWithIndicesBackward": "backward of max-pooling: each window's gradient goes to "
                                    "the position of its max",
    "ViewBackward": "backward of view / flatten: reshapes the gradient back",
    "ReshapeAliasBackward": "backward of reshape: reshapes the gradient back",
    "UnsqueezeBackward": "backward of unsqueeze: squeezes the gradient back",
    "SqueezeBackward": "backward of squeeze: unsqueezes the gradient back",
    "ExpandBackward": "backward of expand / broadcasting: sums the gradient over the copies",
    "CloneBackward": "backward of clone: passes the gradient unchanged",
    "MseLossBackward": "backward of mse_loss: 2 (input - target) / n times the gradient",
    "NllLossBackward": "backward of nll_loss (inside cross_entropy)",
    "LogSoftmaxBackward": "backward of log_softmax (inside cross_entropy)",
}
SUFFIX_NOTE = ("The number ending a built-in node's name (AddBackward0) tells apart the derivative "
               "formulas of one op's overloads; it does not count layers.")


def node_name(fn: Any) -> str:
    return "None" if fn is None else type(fn).__name__


def is_custom(fn: Any) -> bool:
    return isinstance(fn, torch.autograd.function.BackwardCFunction)


def legend(fn: Any) -> str:
    if is_custom(fn):
        return (f"the backward() of the custom Function "
                f"{node_name(fn).removesuffix('Backward')} (your code)")
    return LEGEND.get(re.sub(r"\d+$", "", node_name(fn)), "backward of a built-in torch op")


def input_names(fn: Any) -> list[str]:
    """A custom Function's inputs, named after its forward's arguments (after ctx, in the
    classic forward(ctx, ...); all of them where setup_context takes ctx instead); [] for
    built-in nodes, whose inputs have no names."""
    cls = getattr(fn, "_forward_cls", None)
    forward = getattr(cls, "forward", None)
    modern = getattr(cls, "setup_context", None) is not torch.autograd.Function.setup_context
    try:
        return list(inspect.signature(forward).parameters)[0 if modern else 1:]
    except (TypeError, ValueError):
        return []


def saved_names(fn: Any, names: Mapping[str, torch.Tensor]) -> list[str]:
    """A name for each tensor a custom Function saved: the scenario's name for it, else the
    forward argument it came in as, owned by the Function ("LegendrePolynomial3's x": not the
    scenario's x, which may be another tensor), 'result' for its own output, else
    saved_tensors[i]."""
    args = input_names(fn)
    owner = type(fn).__name__.removesuffix("Backward")
    out = []
    for i, t in enumerate(fn.saved_tensors):
        name = next((n for n, named in names.items() if named is t), None)
        if name is None and t is not None:
            for k, (nf, _) in enumerate(getattr(fn, "next_functions", ())):
                if nf is not None and (t.grad_fn is nf or getattr(nf, "variable", None) is t):
                    name = f"{owner}'s {args[k] if k < len(args) else f'input {k}'}"
                    break
            else:
                name = "result" if t.grad_fn is fn else name_of(t, names)
        out.append(name or f"saved_tensors[{i}]")
    return out


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor, or another Python object over the same memory seen the same way (what a
    saved tensor unpacks to under saved_tensors_hooks)."""
    return a is b or (a.device == b.device and a.dtype == b.dtype and a.shape == b.shape
                      and a.requires_grad == b.requires_grad  # x and x.detach() differ here
                      and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
                      and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() != 0)


def name_of(t: torch.Tensor, names: Mapping[str, torch.Tensor]) -> str | None:
    """The scenario's name for `t`: by identity, else by the same view of the same memory."""
    found = [n for n, named in names.items() if named is t] or [
        n for n, named in names.items() if isinstance(named, torch.Tensor) and same_view(named, t)]
    return found[0] if found else None


def saved_of(fn: Any, describe: Callable[[torch.Tensor], str]) -> list[str]:
    """What the node saved for backward, as 'name = description' lines."""
    if is_custom(fn):
        try:
            return [f"saved_tensors[{i}] = {describe(t) if t is not None else None}"
                    for i, t in enumerate(fn.saved_tensors)]
        except RuntimeError:
            return ["saved_tensors: freed (backward ran without retain_graph=True)"]
    out = []
    for attr in sorted(a for a in dir(fn) if a.startswith("_saved_")):
        try:
            value = getattr(fn, attr)
        except RuntimeError:
            out.append(f"{attr[7:]}: freed (backward ran without retain_graph=True)")
            continue
        if isinstance(value, torch.Tensor):
            text = describe(value)
        elif isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
            text = "[" + ", ".join(describe(v) if isinstance(v, torch.Tensor) else repr(v)
                                   for v in value) + "]"
        else:
            text = repr(value)
        out.append(f"{attr[7:]} = {text if len(text) <= 80 else text[:77] + '...'}")
    return out


def nodes(outputs: torch.Tensor | Sequence[torch.Tensor]) -> list[Any]:
    """Every node reachable from the outputs' grad_fn, once each, breadth first."""
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    found: list[Any] = []
    seen: set[Any] = set()

    def add(fn: Any) -> None:
        if fn is not None and fn not in seen:
            seen.add(fn)
            found.append(fn)
    for out in outputs:  # outputs of one multi-output Function share their grad_fn
        add(out.grad_fn)
    for fn in found:  # grows while we walk it
        for nf, _ in getattr(fn, "next_functions", ()):
            add(nf)
    return found


def leaves(outputs: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors backward() from `outputs` would fill the .grad of."""
    return [fn.variable for fn in nodes(outputs) if hasattr(fn, "variable")]


def explain(outputs: torch.Tensor | Sequence[torch.Tensor], names: Mapping[str, torch.Tensor],
            title: str = "graph") -> str:
    """The walk from `outputs` to the leaves, as text; `names` labels the tensors it meets."""
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    order = nodes(outputs)
    number = {fn: i + 1 for i, fn in enumerate(order)}

    def describe(t: torch.Tensor) -> str:
        desc = f"tensor {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
        name = name_of(t, names)
        return f"{name}: {desc}" if name else desc

    def ref(fn: Any) -> str:
        return "None" if fn is None else f"#{number[fn]} {node_name(fn)}"

    lines = [f"Autograd graph '{title}': the nodes backward() visits, from the output to the "
             f"leaves", ""]
    for i, out in enumerate(outputs):
        label = f"output {i + 1}" if len(outputs) > 1 else "output"
        if out.grad_fn is not None:
            lines.append(f"{label}: {describe(out)}, grad_fn -> {ref(out.grad_fn)}")
        else:
            kind = "a leaf" if out.requires_grad else "not in any graph (requires_grad=False)"
            lines.append(f"{label}: {describe(out)}, no grad_fn: {kind}")
    lines.append("")
    leaves, seen_types = [], {}
    for fn in order:
        lines.append(f"#{number[fn]} {node_name(fn)}")
        seen_types.setdefault(node_name(fn), fn)
        if hasattr(fn, "variable"):
            v = fn.variable
            lines.append(f"    leaf: {describe(v)}, requires_grad={v.requires_grad}; "
                         f"backward() adds into its .grad")
            leaves.append(v)
        nexts = [ref(nf) for nf, _ in getattr(fn, "next_functions", ())]
        if nexts:
            lines.append(f"    next_functions: ({', '.join(nexts)})")
        lines += [f"    saved: {s}" for s in saved_of(fn, describe)]
    lines += ["", "Leaves reached (backward() fills their .grad):"]
    lines += [f"    {describe(v)}" for v in leaves] or ["    none"]
    reached = {id(v) for v in leaves}
    absent = [n for n, t in names.items() if id(t) not in reached and t.grad_fn is None]
    if absent:
        lines += ["Named but not a leaf of this graph (no AccumulateGrad reaches them):"]
        lines += [f"    {n}: requires_grad={names[n].requires_grad}" for n in absent]
    lines += ["", "Legend:"]
    lines += [f"    {name}: {legend(fn)}" for name, fn in sorted(seen_types.items())]
    lines += [f"    {SUFFIX_NOTE}", ""]
    return "\n".join(lines)
