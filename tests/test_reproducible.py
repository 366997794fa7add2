"""Numbers that travel: the committed baseline and the configs' expect targets hold under
torch's other kernel levels and another thread count, as on a user's machine with another CPU.

ATEN_CPU_CAPABILITY is read when torch loads, so each level is its own process. The cheap
entries run under every level; lenet, the costly one, under one other level at 2 threads
(the session's full run covers this CPU's own level at 1 thread)."""
import pytest

from demos.lab.comparing.ensemble import AVX512
from demos.lab.core.machine import cpu_flags
from tests.conftest import BASELINE, CONFIGS, NO_SUPPORT, only_run_dir, run_cli, summary

CHEAP = ("legendre_fit,my_relu,multiply_add,computation_graph,autograd_internals,my_exp,"
         "linear_function,custom_function")
LEVELS = [("default", 1, CHEAP), ("avx2", 2, None), ("avx512", 2, CHEAP)]
NEEDS = {"default": set(), "avx2": {"avx2"}, "avx512": AVX512}


@pytest.mark.slow
@pytest.mark.parametrize("level, threads, only", LEVELS, ids=[f"{lv}-{t}threads"
                                                              for lv, t, _ in LEVELS])
def test_the_committed_baseline_holds_under_another_kernel_level(tmp_path, level, threads,
                                                                 only):
    if not NEEDS[level] <= cpu_flags():
        pytest.skip(f"this CPU has no {level.upper()} kernels")
    proc = run_cli("--config", CONFIGS / "all.yaml", "--device", "cpu", "--threads", threads,
                   "--baseline", BASELINE, *NO_SUPPORT, *(("--only", only) if only else ()),
                   "--no-progress", "--output-dir", tmp_path,
                   env={"ATEN_CPU_CAPABILITY": level})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    s = summary(only_run_dir(tmp_path))
    assert s["fingerprint"]["capability"] == level.upper()
    assert s["fingerprint"]["threads"] == threads
    assert s["fingerprint"]["env"] == {"ATEN_CPU_CAPABILITY": level}
    assert s["baseline"]["status"] == "passed" and s["baseline"]["measured"]
    assert s["baseline"]["compared"] >= (16 if only else 19)
    for e in s["scenarios"]:  # the configs' expect targets hold here too
        expects = [c for c in e["checks"] if c["name"].startswith("expect ")]
        assert expects and all(c["passed"] for c in expects), (e["id"], expects)
    assert "not the baseline's machine" in proc.stdout or s["baseline"]["same_machine"]
