"""What a scenario gets (`Context`) and gives back (`Result`).

A scenario writes its training loop as `for t in ctx.steps(n):` and records values with
`ctx.record(t, loss=loss)`. Recorded tensors stay on their device: nothing here forces a
host/device sync during the loop; they are copied to the host once, by `history()` (see
demos.lab.runner.recorder).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from tqdm import tqdm

from demos.lab.core.files import LOSS_PLOT
from demos.lab.core.machine import available_cores
from demos.lab.core.results import Result
from demos.lab.core.scenario import LOSS, ScenarioConfig
from demos.lab.core.signals import StopRequest
from demos.lab.pages import plots
from demos.lab.pages.artifacts import Artifacts
from demos.lab.runner.looking import Look, look, look_forward, look_second
from demos.lab.runner.recorder import Diverged, Recorder  # noqa: F401 (re-exported)
from demos.lab.runner.torchrun import SINGLE, World


class Interrupted(Exception):
    """A stop was requested (Ctrl-C, SIGTERM); raised at the next step boundary. A scenario may
    catch it, set `result` to what it has found so far (the checks that do not need the end of
    training) and raise it again."""

    def __init__(self, step: int):
        super().__init__(f"interrupted before step {step}")
        self.step = step
        self.result: Result | None = None


@dataclass
class Shared:
    """What every entry of a run shares, and its Context reads. `Shared(device)` will do for a
    Context of one's own (a test, the bench)."""
    device: torch.device
    seed: int = 0
    progress: bool = False
    stop: StopRequest = field(default_factory=StopRequest)
    warn_once: Callable[[str], None] | None = None  # None: the entry's log.warning
    artifacts: Artifacts | None = None  # None: drawn for this Context alone
    world: World = SINGLE
    stepper_gifs: bool = False  # the run's stepper_gifs: each traced backward as a GIF too
    run_dir: Path = Path(".")  # the run's folder (the runner's; a Context has its own folder)
    dry_run: bool = False


class Context:
    """What a scenario gets: its config, device, folder, log and seed; the loop (`steps`), its
    records (`record`, `last`, `history`) and files (`graph`, `plot`, `animate`).

    The runner's own state stays private: it hands in the recorder, the list of looks (what
    each graph and pass found) and the drawing helper, and reads them back itself
    (demos.lab.runner.entry)."""

    def __init__(self, cfg: ScenarioConfig, folder: Path, log: logging.Logger, run: Shared,
                 recorder: Recorder | None = None, looks: list[Look] | None = None):
        """`run`: what the run's entries share; `recorder` (default: one for `cfg`'s
        log_every) and `looks`: this entry's, where the runner reads them back."""
        self.cfg, self.dir, self.log = cfg, folder, log
        self.device, self.seed = run.device, run.seed
        self.stepper_gifs = run.stepper_gifs
        # under torchrun: which rank this is; only rank 0 (world.primary) writes files
        self.world = run.world
        # where float64 checks run: the run's device, but the CPU for MPS (it has no float64)
        self.check_device = torch.device("cpu") if run.device.type == "mps" else run.device
        self.warn_once = run.warn_once or log.warning
        # plots and graph renders: drawn beside the run (see demos.lab.pages.artifacts); where
        # the loop uses every core, held until it is done, so that drawing never slows it
        self._artifacts = run.artifacts or Artifacts(self.warn_once)
        if run.device.type == "cpu" and torch.get_num_threads() >= available_cores():
            self._artifacts.hold()
        self._recorder = recorder or Recorder(run.device, cfg.log_every)
        self._looks = looks if looks is not None else []
        # the loop's hot path: record() straight to the recorder, no call in between
        self.record = self._recorder.record
        self.history, self.last = self._recorder.history, self._recorder.last
        self._progress = run.progress
        self.stop = run.stop  # the run's stop request (Ctrl-C): for a long check to look at
        self.train_s: float | None = None  # the training loop's time in seconds, once it ran
        self._loss_drawn: list[tuple[int, float]] = []  # what loss.png shows

    @property
    def steps_run(self) -> int:
        """The step the loop reached (the steps done)."""
        return self._recorder.steps_run

    # -- the training loop -------------------------------------------------------------------
    def steps(self, n: int, desc: str | None = None) -> Iterator[int]:
        """Yield 0..n-1 with a progress bar; time the loop (`train_s`) around them.

        Between steps it stops the loop for a requested interrupt (raising Interrupted), and
        it makes sure every recorded value was finite: at the first that was not, the loop ends
        there and the runner reports it ("loss stays finite" fails; the scenario's other checks
        still run), or, under torchrun, Diverged is raised.
        """
        rec = self._recorder
        if rec.diverged:  # a loop before this one stopped: so does this one, at once
            return
        rec.last_step = n - 1
        rec.steps_run = 0
        bar = tqdm(total=n, desc=desc or self.cfg.id, leave=False, unit="step",
                   dynamic_ncols=True, disable=not self._progress)  # disabled: a no-op
        # run.log alone: when the loop began (what a test or a user watching the log waits for)
        self.log.info("training: steps 0 to %d", n - 1, extra={"console": False})
        started = time.perf_counter()
        rec.guard_sync(True)
        try:
            for t in range(n):
                if self.stop.requested:
                    raise Interrupted(t)
                yield t
                if rec.diverged:  # soft stop: the loop ends here, the scenario goes on
                    return
                rec.steps_run = t + 1
                if len(rec.pending) >= rec.finite_every:
                    rec.check_finite()
                    if rec.diverged:
                        return
                bar.update()
            rec.check_finite()
        finally:
            rec.guard_sync(False)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # once, so train_s covers the queued work
            self.train_s = time.perf_counter() - started
            bar.close()
            self._artifacts.release()
            self.draw_loss()  # now, beside the checks that follow the loop

    # -- artifacts ---------------------------------------------------------------------------
    def draw_loss(self) -> None:
        """loss.png, from what ctx.record kept under `loss`: drawn when a loop ends, and again
        at the entry's end only where more was recorded since."""
        losses = [(r["step"], r[LOSS]) for r in self.history() if LOSS in r]
        if losses and losses != self._loss_drawn and self.world.primary:
            self._loss_drawn = losses
            self._artifacts.submit(f"{self.cfg.id}/{LOSS_PLOT}", plots.loss_curve,
                                   self.dir / LOSS_PLOT, [s for s, _ in losses],
                                   [v for _, v in losses], title=f"{self.cfg.id}: loss",
                                   log_every=self.cfg.log_every)

    def graph(self, output: torch.Tensor | tuple[torch.Tensor, ...],
              names: Mapping[str, torch.Tensor], name: str = "graph") -> str:
        """The graph behind `output` drawn to <name>.gv/.pdf/.svg, walked and traced, `names`
        labelling its leaves (see demos.lab.runner.looking). Call it before `backward()`, which
        frees what the graph saved. Returns the graphviz source ("" on the ranks but 0)."""
        if not self.world.primary:
            return ""
        seen = look(output, names, name, self.dir, self._artifacts,
                    stepper_gif=self.stepper_gifs, what=self.cfg.id)
        self._looks.append(seen)
        return seen.source

    def forward(self, run: Callable[[], Any], names: Mapping[str, torch.Tensor],
                name: str = "graph") -> Any:
        """Run the forward `run()` and return its output, drawn and traced as `graph` does:
        a graph drawn from one call, `out = ctx.forward(lambda: MyExp.apply(x), {"x": x})`."""
        output = run()
        self.graph(output, names, name)
        return output

    def second_backward(self, run: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
                        reference: Callable[..., Any] | None = None,
                        name: str = "second_backward") -> None:
        """The backward of `run(*inputs)`'s gradient, drawn and traced like the first, and the
        check `second backward agrees` (demos/docs/backward.md#the-second-backward)."""
        if self.world.primary:
            self._looks.append(look_second(run, inputs, reference, name, self.dir,
                                           self._artifacts, what=self.cfg.id))

    def forward_mode(self, run: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
                     name: str = "forward_mode") -> None:
        """A forward-mode pass of `run(*inputs)`, drawn and stepped like a backward, and the
        check `forward mode agrees` (demos/docs/backward.md#forward-mode-step-by-step)."""
        if self.world.primary:
            self._looks.append(look_forward(run, inputs, name, self.dir, self._artifacts,
                                            what=self.cfg.id))

    def plot(self, filename: str, x: Sequence[float], series: Mapping[str, Sequence[float]],
             **labels: Any) -> None:
        """A line plot (title=, xlabel=, ylabel=, logy=) saved in the scenario's folder."""
        if not self.world.primary:
            return
        self._artifacts.submit(f"{self.cfg.id}/{filename}", plots.line_plot, self.dir / filename,
                              list(x), {k: list(v) for k, v in series.items()}, **labels)

    def animate(self, filename: str, x: Sequence[float],
                frames: Sequence[tuple[str, Sequence[float]]],
                fixed: Mapping[str, Sequence[float]], **labels: Any) -> None:
        """An animated GIF: one moving curve (a frame per (caption, y)) over `fixed` curves."""
        if not self.world.primary:
            return
        self._artifacts.submit(f"{self.cfg.id}/{filename}", plots.animation, self.dir / filename,
                              list(x), [(c, list(y)) for c, y in frames],
                              {k: list(v) for k, v in fixed.items()}, **labels)

