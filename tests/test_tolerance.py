"""The tolerance model (demos.lab.core.tolerance): which rule judges a value, how a band is
measured, and that expect, --baseline and --compare share the comparison."""
import math

import pytest

from demos.lab.core import machine as fp
from demos.lab.core.scenario import Target
from demos.lab.core.tolerance import (
    ARITHMETIC,
    SAME_MACHINE,
    Band,
    Drift,
    Tolerance,
    measure,
    rule_for,
    within,
)

BAND = Band(14, 2.9917e-05, 3.0293e-05, 1e-5, 1e-9, 1.038)


def test_each_value_gets_the_first_rule_that_applies():
    # nothing written, nothing measured: the fingerprints decide
    assert rule_for("metrics.x", [], same_machine=True).tier == "same machine"
    other = rule_for("metrics.x", [], same_machine=False, differ="a: AVX2; b: AVX512")
    assert (other.tier, other.rtol, other.atol) == ("arithmetic", *ARITHMETIC)
    assert "fingerprints differ (a: AVX2; b: AVX512)" in other.describe()
    # a measured band wins over both tiers, on any machine
    for same in (True, False):
        assert rule_for("metrics.x", [], same_machine=same, band=BAND).tier == "band"
    # what someone wrote wins over the band; its unset fields come from the tier, not the band
    rule = rule_for("metrics.x", [{"metrics.x": Tolerance(rtol=0.5)}], same_machine=False,
                   band=BAND)
    assert (rule.tier, rule.rtol, rule.atol, rule.ratio) == ("set", 0.5, ARITHMETIC[1], None)
    # exact: the same bits where the fingerprints match; elsewhere the band, saying why
    exact = [{"all": "exact"}]
    assert rule_for("metrics.x", exact, same_machine=True, band=BAND).tier == "exact"
    fallen = rule_for("metrics.x", exact, same_machine=False, band=BAND, differ="a; b")
    assert fallen.tier == "band" and "exact applies only where the fingerprints match" in fallen.why
    # a more specific key's numbers win over a general `exact`, and the other way round
    mixed = [{"all": "exact", "metrics.x": Tolerance(atol=1.0)}]
    assert rule_for("metrics.x", mixed, same_machine=True).tier == "set"
    assert rule_for("metrics.y", mixed, same_machine=True).tier == "exact"
    # a GPU: never tighter than rtol 1e-4, atol 1e-6 (but exact stays exact)
    gpu = rule_for("metrics.x", [], same_machine=True, cpu=False)
    assert (gpu.rtol, gpu.atol) == (1e-4, 1e-6)
    assert rule_for("metrics.x", exact, same_machine=True, cpu=False).rtol == 0


def test_within_linear_ratio_and_nan():
    assert within(1.0, 1.0 + 1e-6, *SAME_MACHINE) and not within(1.0, 1.0 + 1e-5, *SAME_MACHINE)
    assert within(3.0e-5, 3.1e-5, 1e-5, 1e-9, 1.038)       # 3 % up
    assert within(3.1e-5, 3.0e-5, 1e-5, 1e-9, 1.038)       # 3 % down
    assert not within(3.0e-5, 4.1e-5, 1e-5, 1e-9, 1.038)   # 36 %: a learning rate 10 % off
    assert not within(3.0e-5, 1.9e-5, 1e-5, 1e-9, 1.038)   # two-sided: a loss 36 % lower too
    assert within(2e-10, -1e-10, 1e-5, 1e-9, 2.2)          # rounding noise around zero: atol
    nan = math.nan
    assert within(nan, nan, 0, 0) and not within(1.0, nan, 1, 1) and not within(nan, 1.0, 1, 1)


def test_a_band_covers_its_ensemble_and_widens_it_three_times():
    runs = [3.005e-05, 2.9917e-05, 3.0293e-05, 3.0229e-05]
    band = measure(runs)
    assert band.n == 4 and (band.min, band.max) == (min(runs), max(runs))
    assert band.ratio == pytest.approx(math.exp(3 * math.log(max(runs) / min(runs))), rel=1e-3)
    assert band.ratio >= math.exp(3 * math.log(max(runs) / min(runs)))  # rounded up, never down
    for ref in runs:  # any run as the reference: every other run of the ensemble is within
        assert all(within(ref, x, band.rtol, band.atol, band.ratio) for x in runs)
    # a value of mixed sign: linear, 3 x the range
    mixed = measure([-6.7e-10, -2.9e-10, 1.2e-10])
    assert mixed.ratio is None and mixed.atol == pytest.approx(3 * 7.9e-10, rel=1e-2)
    # the same bits in every run: the floor, the arithmetic tier
    same = measure([0.2554861009120941] * 5)
    assert (same.rtol, same.atol, same.ratio) == (*ARITHMETIC, None)
    assert measure([math.nan, math.inf]) is None
    # a spread smaller than the floor adds no ratio
    assert measure([17810224.0, 17810228.0]).ratio is None


def test_a_drift_says_what_judged_it():
    rule = rule_for("metrics.final_loss", [], same_machine=False, band=BAND)
    d = Drift("my_relu", "metrics.final_loss", 3.005e-05, 4.1e-05, rule)
    assert not d.within and d.allowed == pytest.approx(3.005e-05 * 0.038)
    text = d.describe()
    assert "band: ratio 1.038" in text and "14 runs saw 2.9917e-05 to 3.0293e-05" in text
    assert d.to_json()["tier"] == "band"


def test_expect_targets_use_the_same_comparison():
    assert Target(value=2.0).meets(2.0 * (1 + 9e-6))[0]            # the arithmetic tier: 1e-5
    assert not Target(value=2.0).meets(2.0 * (1 + 2e-5))[0]
    ok, detail = Target(value=3.0e-5, ratio=1.05).meets(3.1e-5)
    assert ok and "ratio 1.05" in detail
    assert not Target(value=3.0e-5, ratio=1.05).meets(4.1e-5)[0]
    assert not Target(value=1.0).meets(math.nan)[0]


def test_fingerprints_name_what_differs():
    a = {"device": "cpu", "capability": "AVX2", "threads": 1, "env": {}, "cpu": "X",
         "mkl": "2024.2", "onednn": "3.12.0", "torch": "2.13.0"}
    b = {**a, "capability": "AVX512", "threads": 8}
    assert fp.contrast(a, dict(a)) == "" and not fp.differences(a, dict(a))
    assert fp.contrast(a, b) == "baseline: AVX2, 1 thread; this run: AVX512, 8 threads"
    c = {**a, "env": {"ATEN_CPU_CAPABILITY": "avx2"}}
    assert fp.contrast(a, c) == ("baseline: no kernel variables set; "
                                 "this run: ATEN_CPU_CAPABILITY=avx2")
    assert fp.contrast(a, None).endswith("this run: no fingerprint recorded")


def test_this_process_has_a_fingerprint(cpu):
    import torch

    mine = fp.take(cpu)
    assert mine["capability"] == torch.backends.cpu.get_cpu_capability()
    assert mine["threads"] == torch.get_num_threads() and mine["device"] == "cpu"
    assert mine["torch"] == torch.__version__ and isinstance(mine["torch"], str)
    assert set(mine) == set(fp.KEYS)
