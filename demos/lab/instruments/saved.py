"""What backward keeps: the tensors each node of a graph saved for its backward, each storage
counted once (demos/docs/backward.md#what-backward-keeps)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from demos.lab.core.text import one_line
from demos.lab.instruments.walk import node_name, nodes

Key = tuple[str, int]  # a storage: (device, address); (the tensor's id) for an empty one


def storage_key(t: torch.Tensor) -> Key:
    ptr = parts(t)[0].untyped_storage().data_ptr()
    return (str(t.device), ptr) if ptr else ("empty", id(t))


def storage_bytes(t: torch.Tensor) -> int:
    """What keeping `t` keeps alive: its whole storage (a view keeps its base's); a sparse
    tensor's, its values' and indices'."""
    return sum(p.untyped_storage().nbytes() for p in parts(t))


def parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The dense tensors that hold `t`: itself, or a sparse one's values and indices."""
    rows = t.layout in (torch.sparse_csr, torch.sparse_bsr)  # compressed: else CSC, BSC
    return (t,) if t.layout == torch.strided else (t._values(), t._indices()) \
        if t.layout == torch.sparse_coo else (t.values(), *(
            (t.crow_indices(), t.col_indices()) if rows else (t.ccol_indices(), t.row_indices())))


@dataclass
class Save:
    """One tensor a node keeps for its backward."""
    node: Any                  # the grad_fn that keeps it
    name: str                  # "self", "saved_tensors[0]", "ctx.weight (an attribute)"
    shape: tuple[int, ...]
    dtype: str
    key: Key
    bytes: int                 # its storage's
    whose: str | None = None   # the scenario's name for the tensor, when it has one
    tracked: bool = True       # False: a ctx attribute, outside autograd's saved tensors


@dataclass
class Ledger:
    """Every save of a graph, in the graph walk's order."""
    walk: list[Any]
    saves: list[Save] = field(default_factory=list)
    error: str | None = None   # why the saves could not be read (a graph already freed)

    def storages(self) -> dict[Key, int]:
        """Each storage kept by a tracked save, once, with its bytes."""
        return {s.key: s.bytes for s in self.saves if s.tracked}

    def total(self) -> int:
        return sum(self.storages().values())


def saves_of(fn: Any) -> list[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, tracked) for what `fn` keeps; raises RuntimeError once freed."""
    out: list[tuple[str, torch.Tensor, bool]] = []
    attributes = sorted(a for a in dir(fn) if a.startswith("_saved_"))
    for attr in attributes:  # built-in nodes: one attribute per saved value
        value = getattr(fn, attr)
        values = value if isinstance(value, (tuple, list)) else (value,)
        many = isinstance(value, (tuple, list)) and len(values) > 1
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                name = attr.removeprefix("_saved_")
                out.append((f"{name}[{i}]" if many else name, v, True))
    if not attributes and hasattr(fn, "saved_tensors"):  # a custom Function's ctx
        out += [(f"saved_tensors[{i}]", t, True) for i, t in enumerate(fn.saved_tensors)
                if isinstance(t, torch.Tensor)]
        out += [(f"ctx.{k} (an attribute)", v, False)
                for k, v in sorted(getattr(fn, "__dict__", {}).items())
                if isinstance(v, torch.Tensor)]
    return out


def ledger(outputs: torch.Tensor | Sequence[torch.Tensor],
           names: Mapping[str, torch.Tensor] | None = None) -> Ledger:
    """The saves of the graph behind `outputs`, before any backward has freed them."""
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    walk = nodes([o for o in outputs if o.grad_fn is not None])
    named = {storage_key(t): n for n, t in (names or {}).items()
             if isinstance(t, torch.Tensor)}
    for i, out in enumerate(outputs):  # a Function that saves its output, as MyExp does
        named.setdefault(storage_key(out), "the output" if len(outputs) == 1 else
                         f"output {i + 1}")
    found = Ledger(walk)
    try:
        for fn in walk:
            for name, t, tracked in saves_of(fn):
                key = storage_key(t)
                found.saves.append(Save(fn, name, tuple(t.shape),
                                        str(t.dtype).removeprefix("torch."), key,
                                        storage_bytes(t), named.get(key), tracked))
    except RuntimeError as e:  # "Trying to backward through the graph a second time ..."
        found.saves, found.error = [], one_line(e, 300)
    return found


def held(found: Ledger, order: Sequence[Any]) -> list[int]:
    """Bytes still held for backward: before the first step, then after each node of `order`
    has run (its saves released); a storage is freed when the last node keeping it has run."""
    sizes = found.storages()
    keepers = {k: {id(s.node) for s in found.saves if s.tracked and s.key == k} for k in sizes}
    figures = [sum(sizes.values())]
    ran: set[int] = set()
    for fn in order:
        ran.add(id(fn))
        figures.append(sum(sizes[k] for k, who in keepers.items() if who - ran))
    return figures


def released(found: Ledger, order: Sequence[Any]) -> list[list[Save]]:
    """For each node of `order`, the saves whose storage it frees when it runs: its own, where
    no node after it in `order` keeps the same storage."""
    kept = [{s.key for s in found.saves if s.tracked and s.node is fn} for fn in order]
    return [[s for s in found.saves if s.tracked and s.node is fn
             and not any(s.key in later for later in kept[i + 1:])] for i, fn in enumerate(order)]


def human(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else \
        f"{n / (1 << 20):.1f} MiB"


def explain(found: Ledger, order: Sequence[Any], label: Any = node_name) -> str:
    """explain.txt's section "What backward keeps"."""
    lines = ["What backward keeps: the tensors each node saved for its backward", ""]
    if found.error:
        return "\n".join(lines + [f"could not read the saves: {found.error}", ""])
    for fn in found.walk:
        mine = [s for s in found.saves if s.node is fn]
        if not mine:
            continue
        lines.append(f"{label(fn)} keeps " + "; ".join(
            f"{s.name}: {s.dtype} {list(s.shape)}"
            + (f" (= {s.whose})" if s.whose else "")
            + ("" if s.tracked else ", not tracked by autograd: save_for_backward would check "
                                    "it was not changed in place") for s in mine))
    lines += ["", f"held for backward after the forward: {human(found.total())} in "
                  f"{len(found.storages())} storage(s), each counted once"]
    for fn, step in zip(order, per_step(found, order)):
        if step["releases"]:
            lines.append(f"  {label(fn)} runs and releases {', '.join(step['releases'])}: "
                         f"{human(step['held_after'])} held")
    lines.append("")
    return "\n".join(lines)


def to_json(found: Ledger, order: Sequence[Any], label: Any = node_name) -> dict[str, Any]:
    """backward.json's `saved` block of a graph: every save, the storages once, the total, and
    the bytes held after each step of `order` (the traced backward's)."""
    index = {k: i for i, k in enumerate(found.storages())}
    return {"error": found.error, "total_bytes": found.total(), "storages": len(index),
            "saves": [{"node": label(s.node), "name": s.name, "shape": list(s.shape),
                       "dtype": s.dtype, "bytes": s.bytes, "whose": s.whose,
                       "tracked": s.tracked, "storage": index.get(s.key)} for s in found.saves],
            "held": held(found, order)}


def per_step(found: Ledger, order: Sequence[Any]) -> list[dict[str, Any]]:
    """For each step of `order`: what backward held before and after it, what it released."""
    figures = held(found, order)
    return [{"held_before": before, "held_after": after,
             "releases": sorted({s.name for s in gone})}
            for before, after, gone in zip(figures, figures[1:], released(found, order))]
