"""legendre_fit: y = a + b * P3(c + d * x) fits sin(x) on [-pi, pi], P3 a custom Function.

Document 003, example 2. P3(x) = 0.5 (5x^3 - 3x) has a hand-written backward
P3'(x) = 1.5 (5x^2 - 1); a, b, c, d learn by hand-written SGD under torch.no_grad().

    python runner.py --config configs/legendre_fit.yaml
"""
import math

import torch

from demos.functions import LegendrePolynomial3, legendre_p3_reference
from demos.lab import checks
from demos.lab.context import Context, Result
from demos.scenarios.configs import LegendreFit

P3 = LegendrePolynomial3.apply


def predict(x, a, b, c, d, p3=P3):
    return a + b * p3(c + d * x)  # y = a + b P3(c + d x)


def sse(x, y, a, b, c, d, p3=P3):
    return (predict(x, a, b, c, d, p3) - y).pow(2).sum()  # sum of squared errors


def run(cfg: LegendreFit, ctx: Context) -> Result:
    x = torch.linspace(-math.pi, math.pi, cfg.points, device=ctx.device)  # (points,)
    y = torch.sin(x)
    init = {k: torch.tensor(v, device=ctx.device, requires_grad=True)
            for k, v in zip("abcd", cfg.init)}
    a, b, c, d = (v.detach().clone().requires_grad_() for v in init.values())
    start = predict(x, a, b, c, d).detach()

    ctx.graph(sse(x, y, a, b, c, d), {"a": a, "b": b, "c": c, "d": d})
    frame_every = max(1, cfg.steps // 40)  # the params at 40 steps, for the animation
    loss_fn = torch.compile(sse) if cfg.compile else sse
    for t in ctx.steps(cfg.steps):
        loss = loss_fn(x, y, a, b, c, d)  # sum of (a + b P3(c + d x) - y)^2
        ctx.record(t, loss=loss)
        if t % frame_every == 0 or t == cfg.steps - 1:
            ctx.record(t, always=True, a=a, b=b, c=c, d=d)
        loss.backward()
        with torch.no_grad():
            for p in (a, b, c, d):
                p -= cfg.lr * p.grad
                p.grad = None

    fit = predict(x, a, b, c, d).detach()
    coefficients = ", ".join(f"{k} = {v.item():.4f}".replace("-0.0000", "0.0000")
                             for k, v in zip("abcd", (a, b, c, d)))
    ctx.plot("fit.png", x.tolist(), {"sin(x)": y.tolist(), "start": start.tolist(),
                                     "fit": fit.tolist()},
             title=f"a + b P3(c + d x) after {cfg.steps} steps\n{coefficients}",
             xlabel="x", ylabel="y")
    xs = x.cpu().double()
    frames = [(f"step {r['step']}", predict(xs, r["a"], r["b"], r["c"], r["d"],
                                            p3=legendre_p3_reference).tolist())
              for r in ctx.history() if "a" in r]
    ctx.animate("fit.gif", xs.tolist(), frames, {"sin(x)": y.tolist()},
                title="a + b P3(c + d x)", xlabel="x", ylabel="y")
    return Result(
        metrics={"final_loss": ctx.last("loss")},
        params={"a": a.item(), "b": b.item(), "c": c.item(), "d": d.item()},
        checks=[
            checks.gradcheck("gradcheck", P3, {"x": torch.linspace(-1.5, 1.5, 7).requires_grad_()},
                             ctx.check_device),
            checks.parity("parity", sse, lambda *v: sse(*v, p3=legendre_p3_reference),
                          {"x": x, "y": y, **init}, ctx.check_device),
        ])
