"""The committed baseline keeps its power: bands that hold across machines still fail, naming
the value, when a training really changes (a learning rate 10 % off, an initial value, a
backward off by a constant factor, LeNet's optimizer or one of its layers)."""
import pytest
import torch.nn as nn

from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.my_relu import MyReLU
from tests.conftest import BASELINE, CONFIGS, NO_SUPPORT, check, entry, run_captured
from tests.fixtures.wrong_functions import P3MissingFactor, ReLUScaledBackward


def against_baseline(tmp_path, only, *sets):
    """One full-size entry of all.yaml, changed by `sets`, compared with the committed baseline."""
    run = run_captured(tmp_path, "--config", CONFIGS / "all.yaml", "--device", "cpu",
                       "--only", only, "--baseline", BASELINE, *NO_SUPPORT,
                       *(a for s in sets for a in ("--set", s)))
    return run, entry(run.summary, only)


def failed_baseline(e):
    return sorted(c["name"].split(" ", 1)[1] for c in e["checks"]
                  if c["name"].startswith("baseline ") and c["passed"] is False)


@pytest.mark.parametrize("only, change, named", [
    ("legendre_fit", "scenarios.legendre_fit.lr=5.5e-6", "params.b"),
    ("legendre_fit", "scenarios.legendre_fit.init=[0.0, -1.0, 0.0, 0.33]", "params.b"),
    ("my_relu", "scenarios.my_relu.lr=1.1e-6", "metrics.final_loss"),
    ("multiply_add", "scenarios.multiply_add.lr=0.22", "params.w[0,0]"),
    ("linear_function", "scenarios.linear_function.lr=0.11", "metrics.weight_error"),
])
def test_a_real_change_fails_naming_the_value(tmp_path, only, change, named):
    run, e = against_baseline(tmp_path, only, change)
    assert run.code == 1 and e["status"] == "failed"
    assert named in failed_baseline(e), failed_baseline(e)
    assert f"FAIL baseline {named}: old" in run.out


def test_a_backward_off_by_a_constant_factor_fails_the_baseline(tmp_path, monkeypatch):
    monkeypatch.setattr(MyReLU, "backward", staticmethod(ReLUScaledBackward.backward))
    run, e = against_baseline(tmp_path, "my_relu")
    assert run.code == 1 and failed_baseline(e) == ["metrics.final_loss"]
    assert check(e, "baseline metrics.final_loss")["detail"].startswith("old 3.005")


def test_where_training_forgives_a_wrong_backward_gradcheck_does_not(tmp_path, monkeypatch):
    """legendre_fit with P3's backward 1/1.5 too small still converges to the same least-squares
    fit (b and d within 2e-6): no baseline can see that, which is why every custom Function
    also gets gradcheck and parity against a reference."""
    monkeypatch.setattr(LegendrePolynomial3, "backward", staticmethod(P3MissingFactor.backward))
    run, e = against_baseline(tmp_path, "legendre_fit")
    assert run.code == 1 and check(e, "baseline")["passed"] and not failed_baseline(e)
    assert check(e, "gradcheck")["passed"] is False and check(e, "parity")["passed"] is False


@pytest.mark.slow
def test_lenet_with_sgd_instead_of_adam_fails_on_its_accuracy(tmp_path):
    run, e = against_baseline(tmp_path, "lenet", "scenarios.lenet.optimizer=sgd")
    assert run.code == 1
    assert "metrics.test_accuracy" in failed_baseline(e), (e["metrics"], failed_baseline(e))


@pytest.mark.slow
def test_lenet_without_a_layer_fails_on_its_parameter_count(tmp_path, monkeypatch):
    import demos.scenarios.lenet

    class NoFc2(demos.scenarios.lenet.Net):  # fc2 gone: fc1 feeds fc3 directly
        def __init__(self):
            super().__init__()
            self.fc2 = nn.Identity()
            self.fc3 = nn.Linear(120, 10)

    monkeypatch.setattr(demos.scenarios.lenet, "Net", NoFc2)
    run, e = against_baseline(tmp_path, "lenet")
    assert run.code == 1 and "metrics.parameters" in failed_baseline(e)
    assert check(e, "baseline metrics.parameters")["detail"].startswith("old 81194, new 71390")
