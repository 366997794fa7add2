"""Tensors a Function's callable argument reaches by itself: a checkpoint Function gets
`run_function` and the module's parameters as arguments (so that autograd gives them grads),
while `run_function` computes with the parameters it reaches (a bound method's module, a
closure's cell, a global). torch's gradcheck perturbs the tensors themselves, so the two
agree; the checks work on copies, which the callable would never see. So each call binds
what the callable reaches to that call's copies (a `Tie`), as functional_call does, and the
entry puts the originals back after it."""
from __future__ import annotations

import functools
import types
from typing import Any, Iterator, Mapping, NamedTuple

import torch

from demos.lab.checks.gradients import Fixed


class Tie(NamedTuple):
    """Where a callable reaches an input tensor: `holder[key]` (a module's _parameters or
    _buffers, a function's globals, a list; a closure cell with key None), its path for the
    report, the input's position among apply's arguments and the tensor first there."""
    holder: Any
    key: Any
    path: str
    position: int
    original: torch.Tensor

    def bind(self, tensor: Any) -> None:
        if self.key is None:
            self.holder.cell_contents = tensor
        else:
            self.holder[self.key] = tensor

    def restore(self) -> None:
        self.bind(self.original)


Slot = tuple[Any, Any] | None  # (holder, key) to rebind it; None: held where nothing can be


def reached(obj: Any, path: str, depth: int = 4,
            seen: set[int] | None = None) -> Iterator[tuple[str, torch.Tensor, Slot]]:
    """The tensors `obj` reaches by itself, by path: a module's parameters and buffers (its
    submodules' too), what a function's closure and the globals its code names hold, a bound
    method's object, a partial's function and arguments, in lists, tuples and dicts."""
    seen = set() if seen is None else seen
    if depth < 0 or id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        for name, sub in obj.named_modules(remove_duplicate=False):
            for kind in ("_parameters", "_buffers"):
                for k, t in getattr(sub, kind).items():
                    if isinstance(t, torch.Tensor):
                        yield f"{path}.{name + '.' if name else ''}{k}", t, (getattr(sub, kind), k)
    elif isinstance(obj, types.MethodType):
        yield from reached(obj.__self__, f"{path}.__self__", depth - 1, seen)
        yield from reached(obj.__func__, path, depth - 1, seen)
    elif isinstance(obj, functools.partial):
        yield from reached(obj.func, path, depth - 1, seen)
        for i, a in enumerate(obj.args):
            yield from held(a, f"{path}.args[{i}]", None, depth, seen)
        for k, a in obj.keywords.items():
            yield from held(a, f"{path}.keywords[{k!r}]", None, depth, seen)
    elif isinstance(obj, types.FunctionType):
        code = obj.__code__
        for name, cell in zip(code.co_freevars, obj.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            yield from held(value, f"{path} → {name}", (cell, None), depth, seen)
        for name in sorted(names_in(code)):
            if name in obj.__globals__:
                yield from held(obj.__globals__[name], f"{path} → {name}",
                                (obj.__globals__, name), depth, seen)
    elif isinstance(obj, (list, tuple, dict)):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, v in items:
            yield from held(v, f"{path}[{k!r}]", None if isinstance(obj, tuple) else (obj, k),
                            depth, seen)


def held(value: Any, path: str, slot: Slot, depth: int,
         seen: set[int]) -> Iterator[tuple[str, torch.Tensor, Slot]]:
    """`value` held at `slot`: a tensor itself, or what it reaches."""
    if isinstance(value, torch.Tensor):
        yield path, value, slot
    else:
        yield from reached(value, path, depth - 1, seen)


def names_in(code: types.CodeType) -> set[str]:
    """The global names a function's code (its nested functions' too) reads."""
    return set(code.co_names).union(*(names_in(c) for c in code.co_consts
                                       if isinstance(c, types.CodeType)))


def ties(fixed: Mapping[int, Fixed], given: Mapping[str, torch.Tensor],
         positions: Mapping[str, int]) -> tuple[dict[int, Fixed], list[str]]:
    """`fixed` with the ties of each value to the tensors given (`given`: by input name, the
    caller's own tensors; `positions`: where each input is among apply's arguments), and what
    cannot be tied: an input held where nothing can point elsewhere (a tuple, a partial's
    arguments), said with its path."""
    mine = {id(t): name for name, t in given.items()}
    out, untied = dict(fixed), []
    if not mine:  # a config's inputs: no callable is given one of them
        return out, untied
    for i, f in fixed.items():
        found = []
        for path, t, slot in reached(f.value, f.name):
            name = mine.get(id(t))
            if name is None:
                continue
            if slot is None:
                untied.append(f"{f.name} reaches {name} through {path}, which cannot be "
                              f"pointed at the checks' copies")
            else:
                found.append(Tie(*slot, path, positions[name], t))
        out[i] = f._replace(ties=tuple(found)) if found else f
    return out, untied


def restore(fixed: Mapping[int, Fixed]) -> None:
    """The originals back where each tie found them."""
    for f in fixed.values():
        for t in reversed(f.ties):
            t.restore()
