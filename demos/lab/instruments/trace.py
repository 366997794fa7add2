"""Watch backward run: one real backward over a graph, with a hook on every node
(demos/docs/backward.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Mapping, Sequence

import torch

from demos.lab.core.text import one_line
from demos.lab.instruments.walk import input_names, node_name, nodes
from demos.lab.tensors import describe, in_brief


@dataclass
class Step:
    """One node the engine ran: what arrived (grad_outputs) and what it sent (grad_inputs)."""
    fn: Any
    received: tuple[torch.Tensor | None, ...]
    sent: tuple[torch.Tensor | None, ...] = ()
    runs: int = 1  # how many times its pre-hook fired (once, in a sound backward)


@dataclass
class Trace:
    """One traced backward over a graph: the walk's nodes, the steps in engine order, the
    leaves' `.grad` after it, and the names the scenario gave its tensors."""
    title: str
    walk: list[Any]                      # every node reachable, in the graph walk's order
    steps: list[Step]
    grads: dict[int, torch.Tensor | None]  # id(leaf) -> its .grad right after the traced backward
    names: dict[int, str]                  # id(tensor) -> name, leaves and named non-leaves
    fn_names: dict[Any, str] = field(default_factory=dict)  # grad_fn -> the named tensor's name
    error: str | None = None               # why backward could not be traced

    def number(self, fn: Any) -> int:
        return self.walk.index(fn) + 1

    def skipped(self) -> list[dict[str, str]]:
        """Where the engine sends nothing: inputs that need no gradient (a None entry in
        next_functions), all that a full backward skips (demos/docs/backward.md)."""
        out = []
        for fn in self.walk:
            for i, (nf, _) in enumerate(getattr(fn, "next_functions", ())):
                if nf is None:
                    out.append({"node": self.label(fn), "input": str(i),
                                "reason": f"{self.input_name(fn, i)} needs no gradient (its "
                                          f"next_functions entry is None): nothing is sent "
                                          f"there"})
        return out

    def label(self, fn: Any) -> str:
        """'#2 AddBackward0 (c)': the walk's number, the node, and whose node it is."""
        whose = self.whose(fn)
        return f"#{self.number(fn)} {node_name(fn)}" + (f" ({whose})" if whose else "")

    def input_name(self, fn: Any, i: int) -> str:
        """'input 1 (x)': a custom Function's inputs are named after its forward's arguments."""
        args = input_names(fn)
        return f"input {i}" + (f" ({args[i]})" if i < len(args) else "")

    def whose(self, fn: Any) -> str | None:
        if hasattr(fn, "variable"):
            return self.names.get(id(fn.variable), "a leaf")
        return self.fn_names.get(fn)


def record(outputs: torch.Tensor | Sequence[torch.Tensor], names: Mapping[str, torch.Tensor],
           title: str = "graph") -> Trace | None:
    """Run one hooked backward over the graph behind `outputs`; None when it has no graph."""
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    roots = [o for o in outputs if o.grad_fn is not None]
    if not roots:
        return None
    walk = nodes(roots)
    made: dict[Any, list[str]] = {}  # one node may make several outputs (multi-output)
    for i, out in enumerate(outputs):
        if out.grad_fn is not None:
            made.setdefault(out.grad_fn, []).append(str(i + 1))
    fn_names = {fn: "the output" if len(outputs) == 1 else
                ("output " if len(ns) == 1 else "outputs ") + " and ".join(ns)
                for fn, ns in made.items()}
    fn_names.update({t.grad_fn: n for n, t in names.items() if t.grad_fn is not None})
    trace = Trace(title, walk, [], {}, {id(t): n for n, t in names.items()}, fn_names)
    leaves = [fn.variable for fn in walk if hasattr(fn, "variable")]
    kept = [(leaf, leaf.grad) for leaf in leaves]
    running: dict[Any, Step] = {}
    handles = []

    def before(fn: Any, grad_outputs: Any) -> None:  # fn's pre-hook, with fn bound (partial)
        if fn in running:
            running[fn].runs += 1
        else:  # copies: a backward may change its grad_output in place
            running[fn] = step = Step(fn, tuple(map(copied, grad_outputs)))
            trace.steps.append(step)

    def after(fn: Any, grad_inputs: Any, grad_outputs: Any) -> None:
        running[fn].sent = tuple(map(copied, grad_inputs))

    try:
        for leaf in leaves:
            leaf.grad = None  # so that .grad afterwards is exactly what this backward added
        for fn in walk:
            handles += [fn.register_prehook(partial(before, fn)),
                        fn.register_hook(partial(after, fn))]
        # gradient 1 for every output element, a fresh contiguous tensor of ones as
        # out.backward(torch.ones_like(out)) gives, through a multiplication and a sum that
        # are not hooked (so not in the trace); backward() without an explicit gradient
        # spares the first call torch's lazy import of sympy (~0.5 s)
        total = sum((r * torch.ones_like(r)).sum() for r in roots) \
            if len(roots) > 1 or roots[0].dim() else roots[0]
        total.backward(retain_graph=True)
        trace.grads = {id(leaf): copied(leaf.grad) for leaf in leaves}
    except Exception as e:  # freed saved tensors; a user's backward that raises
        trace.error = one_line(e)
    finally:
        for h in handles:
            h.remove()
        for leaf, grad in kept:
            leaf.grad = grad
    return trace


def copied(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy of `t` as it is now, out of any graph (None stays None)."""
    return None if t is None else t.detach().clone()


# -- as data and as text -----------------------------------------------------------------------
def to_json(trace: Trace) -> dict[str, Any]:
    """backward.json's entry for one graph: the steps in engine order, the skipped, the leaves."""
    steps = []
    for k, s in enumerate(trace.steps, 1):
        edges = []
        for i, (nf, _) in enumerate(getattr(s.fn, "next_functions", ())):
            grad = s.sent[i] if i < len(s.sent) else None
            edges.append({"input": i, "input_name": trace.input_name(s.fn, i),
                          "to": None if nf is None else trace.label(nf),
                          "dot_edge": None if nf is None else f"{id(nf)}->{id(s.fn)}",
                          "grad": describe(grad) if nf is not None else None,
                          "carries": "nothing (needs no gradient)" if nf is None else
                          "nothing (None)" if grad is None else "gradient"})
        step: dict[str, Any] = {
            "step": k, "node": trace.label(s.fn), "type": node_name(s.fn),
            "walk_number": trace.number(s.fn), "dot_node": str(id(s.fn)),
            "received": [describe(g) for g in s.received], "sent": edges}
        if hasattr(s.fn, "variable"):
            leaf = s.fn.variable
            step["leaf"] = {"name": trace.whose(s.fn), "dot_node": str(id(leaf)),
                            "dot_edge": f"{id(leaf)}->{id(s.fn)}",
                            "grad": describe(trace.grads.get(id(leaf)))}
        steps.append(step)
    return {"graph": trace.title, "error": trace.error, "steps": steps,
            "skipped": trace.skipped()}


def explain(trace: Trace) -> str:
    """The section "backward, step by step" of explain.txt, like document 002's walk."""
    lines = [f"Backward, step by step ('{trace.title}'): what the engine ran, in its order, "
             f"with the real gradients", ""]
    if trace.error:
        return "\n".join(lines + [f"could not run backward over it: {trace.error}", ""])
    for k, s in enumerate(trace.steps, 1):
        got = " and ".join(in_brief(g) for g in s.received)
        if hasattr(s.fn, "variable"):
            grad = f"{trace.whose(s.fn)}.grad" if id(s.fn.variable) in trace.names else \
                "the leaf's .grad"
            now = in_brief(trace.grads.get(id(s.fn.variable)))
            lines.append(f"step {k}: {trace.label(s.fn)} receives nothing (None): {grad} stays "
                         f"as it was ({now})" if s.received[:1] == (None,) else
                         f"step {k}: {trace.label(s.fn)} receives {got} and adds it into {grad} "
                         f"({grad} is now {now})")
            continue
        sent = []
        for i, (nf, _) in enumerate(getattr(s.fn, "next_functions", ())):
            grad = s.sent[i] if i < len(s.sent) else None
            if nf is None:
                sent.append(f"{'None' if grad is None else in_brief(grad)} for "
                            f"{trace.input_name(s.fn, i)}, which needs no gradient (an edge "
                            f"that carries nothing)")
            elif grad is None:
                sent.append(f"None to {trace.label(nf)} (an edge that carries nothing)")
            else:
                sent.append(f"{in_brief(grad)} to {trace.label(nf)}")
        lines.append(f"step {k}: {trace.label(s.fn)} receives {got} and sends "
                     + (" and ".join([", ".join(sent[:-1]), sent[-1]] if len(sent) > 1 else sent)
                        or "nothing on"))
    lines.append("")
    return "\n".join(lines)
