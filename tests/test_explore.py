"""Exploring is not failing: a changed setting reports the config's targets as not evaluated,
saying which setting differs (expect.written_for); the unchanged config stays strict."""
import pytest

from demos.cli import main
from tests.conftest import CONFIGS, check, entry, run_captured

FIT = ("--config", CONFIGS / "legendre_fit.yaml", "--device", "cpu",
       "--set", "scenarios.legendre_fit.support=[]")


def targets(e):
    return [c for c in e["checks"] if c["name"].startswith("expect ")]


def test_a_changed_learning_rate_is_exploring_not_a_failure(tmp_path):
    run = run_captured(tmp_path, *FIT, "--set", "scenarios.legendre_fit.lr=1e-5")
    e = entry(run.summary, "legendre_fit")
    assert run.code == 0 and e["status"] == "passed", run.out
    assert len(targets(e)) == 5 and all(c["passed"] is None for c in targets(e))
    b = check(e, "expect params.b")["detail"]
    assert b.startswith("not evaluated: lr is 1e-05 here; the targets hold for 5e-06 "
                        "(expect.written_for) (got -2.")
    assert "NOT EVALUATED 5 expect target(s): lr is 1e-05 here" in run.out
    assert check(e, "gradcheck")["passed"] and check(e, "parity")["passed"]  # still checked


def test_the_config_as_written_is_still_held_to_its_targets(tmp_path):
    run = run_captured(tmp_path, *FIT, "--set",
                       "scenarios.legendre_fit.expect.params.b.value=-2.0")
    e = entry(run.summary, "legendre_fit")
    assert run.code == 1 and check(e, "expect params.b")["passed"] is False
    assert "NOT EVALUATED" not in run.out


def test_the_run_seed_counts_as_a_setting(tmp_path):
    run = run_captured(tmp_path, *FIT, "--seed", "3", "--set",
                       "scenarios.legendre_fit.expect.written_for={seed: 0}")
    e = entry(run.summary, "legendre_fit")
    assert run.code == 0
    assert check(e, "expect params.b")["detail"].startswith(
        "not evaluated: seed is 3 here; the targets hold for 0")


@pytest.mark.parametrize("key, words", [
    ("lrr", "scenarios[0].expect.written_for.lrr: legendre_fit has no setting 'lrr' "
            "(did you mean 'lr'?)"),
    # a value the setting could never have would leave the targets never evaluated: refused
    ("seed", "scenarios[0].expect.written_for.seed: must be an integer, got 'abc'"),
    ("init", "scenarios[0].expect.written_for.init: must be a list, got 'abc'"),
])
def test_written_for_names_settings_the_entry_has(capsys, key, words):
    assert main([*map(str, FIT), "--print-config", "--set",
                 f"scenarios.legendre_fit.expect.written_for={{{key}: "
                 f"{'1' if key == 'lrr' else 'abc'}}}"]) == 2
    assert words in capsys.readouterr().err
