"""What a training loop records: scalar values per step, checked for NaN and infinity
without a host/device sync per step, copied to the host once (`history()`)."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch


class Diverged(Exception):
    """A recorded value (the loss) stopped being finite at `step`."""

    def __init__(self, step: int, name: str, value: float):
        super().__init__(f"{name} is {value} at step {step}")
        self.step, self.name, self.value = step, name, value


class Recorder:
    """The recorded columns of one entry: {name: (steps, values)}, checked for NaN and inf."""

    def __init__(self, device: torch.device, log_every: int, finite_every: int | None = None,
                 forbid_sync: bool = False, soft_stop: bool = False):
        # how often recorded values are checked for NaN/inf: every step on the CPU (free), in
        # windows on an accelerator, where each check is a host/device sync
        self.finite_every = finite_every or (1 if device.type == "cpu" else 100)
        self.finite_now = self.finite_every == 1
        self.log_every = log_every
        # tests: make any host/device sync inside the training steps an error (CUDA only)
        self.forbid_sync = forbid_sync and device.type == "cuda"
        self.pending: list[tuple[int, str, torch.Tensor]] = []  # values not yet checked
        self.checked_names: set[str] = set()
        self.columns: dict[str, tuple[list[int], list[Any]]] = defaultdict(lambda: ([], []))
        self.last_step = -1     # the loop's last step: always recorded
        self.steps_run = 0      # the step the loop reached (the steps done)
        # soft_stop: a value that stops being finite ends the loop (ctx.steps returns) and the
        # scenario goes on to its checks; else Diverged is raised where it was found. Under
        # torchrun the ranks must stop together, so there it is raised.
        self.soft_stop = soft_stop
        self.diverged: Diverged | None = None

    def record(self, step: int, always: bool = False, **values: torch.Tensor | float) -> None:
        """Keep scalar `values` for this step if it is a log step (every `log_every`, the last)
        or `always` (a once-per-epoch accuracy). Each is checked for NaN/inf: on the CPU at
        once (.item(), no sync); elsewhere in windows (check_finite). Runs every step: written
        for speed."""
        if self.diverged is not None:  # after the loop stopped: nothing more is kept
            return
        keep = always or step % self.log_every == 0 or step == self.last_step
        for name, v in values.items():
            if isinstance(v, torch.Tensor):
                if v.numel() != 1:
                    raise ValueError(f"record({name}=...) takes scalars, got shape "
                                     f"{tuple(v.shape)}")
                self.checked_names.add(name)
                if self.finite_now:
                    v = v.item()
                    if not math.isfinite(v):
                        self.diverge(step, name, v)
                        return
                else:  # a parameter (the optimizer changes it in place): its value now
                    v = v.detach().clone() if v.requires_grad and v.is_leaf else v.detach()
                    self.pending.append((step, name, v))
            if keep:
                column = self.columns[name]
                column[0].append(step)
                column[1].append(v)

    def guard_sync(self, on: bool) -> None:
        if self.forbid_sync:
            torch.cuda.set_sync_debug_mode("error" if on else "default")

    def check_finite(self) -> None:
        """Check the values recorded since the last check, with one host/device sync for the
        whole window; Diverged at the first NaN or inf."""
        if not self.pending:
            return
        window, self.pending = self.pending, []
        self.guard_sync(False)  # the one sync per window, allowed
        ok = torch.stack([v.reshape(()).double() for _, _, v in window]).isfinite().tolist()
        self.guard_sync(True)
        if not all(ok):
            step, name, value = window[ok.index(False)]
            self.diverge(step, name, value.item())

    def diverge(self, step: int, name: str, value: float) -> None:
        """Stop at `step`: drop what was recorded after it, keep the bad value; note Diverged
        (soft_stop), or raise it."""
        for steps, values in self.columns.values():
            while steps and steps[-1] >= step:
                steps.pop()
                values.pop()
        steps, values = self.columns[name]
        steps.append(step)
        values.append(value)
        self.steps_run = step  # the steps completed before it (a window may have run further)
        self.diverged = Diverged(step, name, value)
        if not self.soft_stop:
            raise self.diverged

    def history(self) -> list[dict[str, Any]]:
        """The recorded rows ({'step': s, name: value}, by step) as floats; one host copy."""
        rows: dict[int, dict[str, Any]] = {}
        for name, (steps, values) in self.columns.items():
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            if tensors:  # kept on an accelerator: copy them to the host together, once
                floats = iter(torch.stack([t.reshape(()).double() for t in tensors]).tolist())
                values[:] = [next(floats) if isinstance(v, torch.Tensor) else v for v in values]
            for step, value in zip(steps, values):
                rows.setdefault(step, {"step": step})[name] = float(value)
        return [rows[s] for s in sorted(rows)]

    def last(self, name: str) -> float:
        """The last recorded value of `name`."""
        for row in reversed(self.history()):
            if name in row:
                return row[name]
        raise KeyError(f"nothing recorded under '{name}'")
