"""What the lab's instruments must agree with, held here rather than in every run: a traced
backward (demos.lab.instruments.trace) with its graph and the leaves' .grad, a ledger of saved
tensors (demos.lab.instruments.saved) with a pack hook's count of the same forward, a traced
second backward with torch.autograd.grad. They test torch and the lab, not a user's Function."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from demos.lab.instruments import saved
from demos.lab.instruments.trace import Trace
from demos.lab.instruments.walk import node_name
from demos.lab.tensors import in_brief


def equal(got: torch.Tensor | None, want: torch.Tensor | None) -> bool:
    """The same gradient, bit for bit (NaN where NaN), or both None."""
    if got is None or want is None:
        return got is None and want is None
    return got.shape == want.shape and bool(torch.isclose(
        got.to(want.dtype), want, rtol=0, atol=0, equal_nan=True).all())


def trace_problems(trace: Trace) -> list[str]:
    """How a traced backward disagrees with its graph and its leaves: every node of the graph
    walk ran, once, after every node that feeds it, and no other; each gradient recorded into a
    leaf is the leaf's .grad after the traced backward. [] when it agrees."""
    if trace.error:
        return [f"could not run backward over it: {trace.error}"]
    problems = []
    position: dict[Any, int] = {}
    for i, step in enumerate(trace.steps):
        if step.runs != 1 or step.fn in position:
            problems.append(f"{trace.label(step.fn)} ran {step.runs + (step.fn in position)} "
                            f"times")
        position.setdefault(step.fn, i)
    for step in trace.steps:  # a node runs after every node that sends it a gradient
        for feeder in trace.steps:
            if any(nf is step.fn for nf, _ in getattr(feeder.fn, "next_functions", ())) and \
                    position[feeder.fn] > position[step.fn]:
                problems.append(f"{trace.label(step.fn)} ran before {trace.label(feeder.fn)}, "
                                f"which feeds it")
    ran, walked = set(position), set(trace.walk)  # the walk skips nothing: see Trace.skipped
    if ran - walked:
        problems.append("ran but not in the graph walk: " + ", ".join(
            node_name(fn) for fn in ran - walked))
    if walked - ran:
        problems.append("in the graph walk but never ran: " + ", ".join(
            trace.label(fn) for fn in trace.walk if fn not in ran))
    for step in trace.steps:
        if hasattr(step.fn, "variable"):
            got = step.received[0] if step.received else None
            grad = trace.grads.get(id(step.fn.variable))
            if not equal(got, grad):
                problems.append(f"{trace.label(step.fn)} received {in_brief(got)} but "
                                f"{trace.whose(step.fn)}.grad is {in_brief(grad)}")
    return problems


@contextlib.contextmanager
def counting_saves() -> Iterator[dict[saved.Key, int]]:
    """While it lasts, every tensor autograd saves is counted (its storage, once, with its
    bytes) by a pack hook; the tensors themselves are kept as they are."""
    counted: dict[saved.Key, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        counted.setdefault(saved.storage_key(t), saved.storage_bytes(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield counted


def ledger_problems(found: saved.Ledger, counted: dict[saved.Key, int]) -> list[str]:
    """How a ledger read off the graph differs from the pack hook's count of its forward: the
    same storages, with the same bytes. [] when it agrees."""
    if found.error:
        return [f"could not read the saves: {found.error}"]
    mine = found.storages()
    if mine == counted:
        return []
    return [f"the graph shows {len(mine)} storage(s), {saved.human(found.total())}; the pack "
            f"hook counted {len(counted)}, {saved.human(sum(counted.values()))} "
            f"({len(set(counted) - set(mine))} not in the ledger, "
            f"{len(set(mine) - set(counted))} the hook never saw)"]


def second_pass_problems(traced: Trace, first: Any) -> list[str]:
    """How the traced second backward (from first.root, the sum of the gradients of a
    create_graph backward) differs from torch.autograd.grad of the same root: what it put into
    each input's .grad, bit for bit. [] when it agrees."""
    need = {k: x for k, x in first.inputs.items() if x.requires_grad}
    want = torch.autograd.grad(first.root, list(need.values()), retain_graph=True,
                               allow_unused=True)
    return [f"the traced second pass put {in_brief(traced.grads.get(id(x)))} into {k}.grad, "
            f"torch.autograd.grad gives {in_brief(w)}"
            for (k, x), w in zip(need.items(), want)
            if not equal(traced.grads.get(id(x)), w)]
