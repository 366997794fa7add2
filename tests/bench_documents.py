"""The documents' own work, bare, in one Python process: the floor `python -m tests.bench
--only whole-run` measures configs/all.yaml against (issue 26).

Each example as its document writes it (today's API), at the sizes configs/all.yaml runs:
legendre 2000 steps, MyReLU 500, MultiplyAdd 300, LeNet 15 epochs of Adam on the digits, the
graphs of documents 001 and 002, MyExp, LinearFunction with gradcheck, a cube Function with
gradcheck and gradgradcheck. No plots, renders, checks beyond the documents' own, or report.
One thread, as the bench runs all.yaml. Run as `python -m tests.bench_documents [NAME ...]`
(one example alone: `legendre`, the floor of `python runner.py legendre_fit`); it prints its
wall time from the interpreter's start.
"""
from __future__ import annotations

import time

import torch

from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp


class Bare:
    """What a scenario's tutorial code asks of `ctx`, doing nothing: the document's script as
    the scenario file writes it, with no lab around it (steps: a range; record: nothing)."""

    seed = 0

    def __init__(self, device: torch.device | None = None):
        self.device = device or torch.device("cpu")

    def steps(self, n: int, start: int = 0) -> range:
        return range(start, n)

    def record(self, *args: object, **values: object) -> None:
        pass


def legendre(steps: int = 2000, lr: float = 5e-6) -> None:  # document 003, example 2
    from demos.scenarios import legendre_fit  # its tutorial's code, as the scenario runs it

    legendre_fit.train(legendre_fit.Config(scenario="legendre_fit", id="bare", steps=steps,
                                           lr=lr), Bare())


def my_relu(steps: int = 500, lr: float = 1e-6) -> None:  # document 004, last example
    from demos.scenarios import my_relu as scenario  # its tutorial's code, as the scenario runs it

    cfg = scenario.Config(scenario="my_relu", id="bare", steps=steps, lr=lr)
    scenario.train(cfg, Bare(), *scenario.data(cfg, Bare()))


def multiply_add(steps: int = 300, lr: float = 0.2) -> None:  # document 000
    w_true = torch.tensor([[0.5, -1.0], [2.0, 1.5]])
    b_true = torch.tensor([[0.1, 0.2], [-0.3, 0.4]])
    w = torch.rand(2, 2, requires_grad=True)
    b = torch.rand(2, 2, requires_grad=True)
    x = torch.rand(2, 2, requires_grad=True)
    MultiplyAdd.apply(w, x, b).backward(torch.ones(2, 2))  # the document's one backward
    for _ in range(steps):
        xs = torch.randn(2, 2)
        loss = (MultiplyAdd.apply(w, xs, b) - (w_true * xs + b_true)).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (w, b):
                p -= lr * p.grad
                p.grad = None


def lenet(epochs: int = 15) -> None:  # document 004, first example
    from demos.scenarios import lenet as scenario  # its tutorial's code, as the scenario runs it

    cfg = scenario.Config(scenario="lenet", id="bare", epochs=epochs)
    images, labels, train_ids, test_ids, shuffles, net, optimizer = scenario.setup(cfg, Bare())
    scenario.train(cfg, Bare(), net, optimizer, images, labels, train_ids, test_ids, shuffles)


def graphs() -> None:  # documents 001 and 002: h = w*x + b three ways; e = (a + b) * d
    for detach in (False, True):
        x = torch.tensor(1.0, requires_grad=True)
        w, b = torch.tensor(4.0, requires_grad=True), torch.tensor(0.5, requires_grad=True)
        h = w * (x.detach() if detach else x) + b
        h.backward()
    a, b, d = (torch.tensor(v, requires_grad=True) for v in (1.0, 3.0, 4.0))
    c = a + b
    c.retain_grad()
    e = c * d
    e.backward()


def functions() -> None:  # MyExp (003), LinearFunction with gradcheck (004), a cube Function
    x = torch.randn(3, requires_grad=True)
    MyExp.apply(x).sum().backward()
    inputs = (torch.randn(20, 20, dtype=torch.double, requires_grad=True),
              torch.randn(30, 20, dtype=torch.double, requires_grad=True))
    torch.autograd.gradcheck(LinearFunction.apply, inputs, eps=1e-6, atol=1e-4)

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return w * x ** 3 + b

        @staticmethod
        def backward(ctx, grad_output):
            x, w = ctx.saved_tensors
            return (grad_output * 3 * w * x ** 2, (grad_output * x ** 3).sum(0),
                    grad_output.sum(0))

    cube = (torch.randn(5, 3, dtype=torch.double, requires_grad=True),
            torch.rand(3, dtype=torch.double, requires_grad=True) + 0.5,
            torch.tensor([0.1, 0.2, 0.3], dtype=torch.double, requires_grad=True))
    torch.autograd.gradcheck(Cube.apply, cube)
    torch.autograd.gradgradcheck(Cube.apply, cube)


WORK = (legendre, my_relu, multiply_add, lenet, graphs, functions)


def main(names: list[str]) -> None:
    """Each example of WORK (those named, when names are given), then the wall time."""
    unknown = [n for n in names if n not in [w.__name__ for w in WORK]]
    if unknown:
        raise SystemExit(f"bench_documents: no example {', '.join(unknown)}; the examples: "
                         f"{', '.join(w.__name__ for w in WORK)}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for work in WORK:
        if not names or work.__name__ in names:
            work()
    print(f"{time.time() - START:.3f}")


START = time.time()  # set when the module loads; the bench times the process from outside

if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
