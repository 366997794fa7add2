"""legendre_fit: y = a + b * P3(c + d * x) fits sin(x) on [-pi, pi], P3 a custom Function.

Document 003, example 2. P3(x) = 0.5 (5x^3 - 3x) has a hand-written backward
P3'(x) = 1.5 (5x^2 - 1); a, b, c, d learn by hand-written SGD under torch.no_grad().

    python runner.py --config configs/legendre_fit.yaml
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from demos.api import (
    TRAINING_FILES,
    Capability,
    ConfigError,
    Result,
    Scenario,
    ScenarioConfig,
    graph_files,
    param,
    pass_files,
    run_alone,
    support_param,
)

if TYPE_CHECKING:
    from demos.api import Context


@dataclass
class Config(ScenarioConfig):
    """A custom Function for the Legendre polynomial P3 fits sin(x) on [-pi, pi] (doc 003)."""
    points: int = param(2000, "number of x points in linspace(-pi, pi); at most 10**6 (each "
                              "step makes about ten tensors of this size)", ge=2, le=10**6)
    steps: int = param(2000, "SGD steps", ge=1, le=10**9)
    lr: float = param(5e-6, "learning rate of the hand-written SGD", gt=0)
    init: list[float] = param([0.0, -1.0, 0.0, 0.3], "initial a, b, c, d")
    compile: bool = param(False, "run the loss (forward and backward) through torch.compile; "
                                 "see Performance for when it helps")
    support: list[Capability] = support_param()

    def validate(self, where: str) -> None:
        if len(self.init) != 4:
            raise ConfigError(f"{where}.init: must list 4 numbers (a, b, c, d), "
                              f"got {len(self.init)}")


def predict(x, a, b, c, d, p3):
    return a + b * p3(c + d * x)  # y = a + b P3(c + d x)


def sse(x, y, a, b, c, d, p3):
    return (predict(x, a, b, c, d, p3) - y).pow(2).sum()  # sum of squared errors


def short(v: float) -> str:
    """A coefficient for the plot's title: 4 decimals, or 4 digits where it is huge."""
    return f"{v:.4g}" if abs(v) >= 1e4 or not math.isfinite(v) else \
        f"{v:.4f}".replace("-0.0000", "0.0000")


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.api import gradcheck, parity, support
    from demos.documents.functions import (
        LegendrePolynomial3,
        LegendrePolynomial3Modern,
        legendre_p3_reference,
    )
    P3 = LegendrePolynomial3.apply
    x = torch.linspace(-math.pi, math.pi, cfg.points, device=ctx.device)  # (points,)
    y = torch.sin(x)
    init = {k: torch.tensor(v, device=ctx.device, requires_grad=True)
            for k, v in zip("abcd", cfg.init)}
    a, b, c, d = (v.detach().clone().requires_grad_() for v in init.values())
    start = predict(x, a, b, c, d, P3).detach()

    ctx.forward(lambda: sse(x, y, a, b, c, d, P3), {"a": a, "b": b, "c": c, "d": d})
    frame_every = max(1, cfg.steps // 40)  # the params at 40 steps, for the animation
    loss_fn = torch.compile(sse) if cfg.compile else sse
    for t in ctx.steps(cfg.steps):
        loss = loss_fn(x, y, a, b, c, d, P3)  # sum of (a + b P3(c + d x) - y)^2
        ctx.record(t, loss=loss)
        if t % frame_every == 0 or t == cfg.steps - 1:
            ctx.record(t, always=True, a=a, b=b, c=c, d=d)
        loss.backward()
        with torch.no_grad():
            for p in (a, b, c, d):
                p -= cfg.lr * p.grad
                p.grad = None

    fit = predict(x, a, b, c, d, P3).detach()
    coefficients = ", ".join(f"{k} = {short(v.item())}" for k, v in zip("abcd", (a, b, c, d)))
    done = ctx.steps_run  # the loop stops early where the loss stops being finite
    after = f"after {done} steps" if done == cfg.steps else \
        f"stopped after {done} of {cfg.steps} steps"
    ctx.plot("fit.png", x.tolist(), {"sin(x)": y.tolist(), "start": start.tolist(),
                                     "fit": fit.tolist()},
             title=f"a + b P3(c + d x) {after}\n{coefficients}", xlabel="x", ylabel="y")
    xs = x.cpu().double()
    frames = [(f"step {r['step']}", predict(xs, r["a"], r["b"], r["c"], r["d"],
                                            legendre_p3_reference).tolist())
              for r in ctx.history() if "a" in r]
    ctx.animate("fit.gif", xs.tolist(), frames, {"sin(x)": y.tolist()},
                title="a + b P3(c + d x)", xlabel="x", ylabel="y")
    twin_inputs = {"x": torch.linspace(-1.5, 1.5, 7, dtype=torch.float64).requires_grad_()}
    ctx.forward_mode(LegendrePolynomial3Modern.apply, twin_inputs)  # the twin's jvp, stepped
    matrix, supported = support.classic_and_twin(  # P3 and its twin, transform by transform
        LegendrePolynomial3, LegendrePolynomial3Modern, legendre_p3_reference, twin_inputs,
        ctx.check_device, cfg.support)
    return Result(
        metrics={"final_loss": ctx.last("loss")},
        params={"a": a.item(), "b": b.item(), "c": c.item(), "d": d.item()}, support=matrix,
        checks=supported + [
            gradcheck("gradcheck", P3, {"x": torch.linspace(-1.5, 1.5, 7).requires_grad_()},
                      ctx.check_device),
            parity("parity", lambda *v: sse(*v, P3),
                   lambda *v: sse(*v, legendre_p3_reference),
                   {"x": x, "y": y, **init}, ctx.check_device),
        ])


SCENARIO = Scenario(
    name="legendre_fit", config=Config, run=run, document="003, example 2",
    params=("a", "b", "c", "d"), metrics=("final_loss",),
    files=(*TRAINING_FILES, *graph_files("graph"), *pass_files("forward_mode"), "explain.txt",
           "fit.png", "fit.gif"),
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
