"""The support matrices computed beside the run (demos.lab.checks.beside): the same rows as in
the run's own process, for right and wrong Functions alike; a Function that kills the process
fails the row it did it in, and the others are still computed; what cannot be pickled, and
runs that live on (--watch, demos.run), stay in the run's process."""
import pytest
import torch

from demos.documents import functions as fns
from demos.lab.checks import beside, support
from tests.conftest import CONFIGS, run_captured
from tests.fixtures import wrong_functions as wrong

D = torch.float64
NO_COMPILE = [r for r in support.CAPABILITIES if r != "compile"]


def x43():
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=D,
                       requires_grad=True)


@pytest.fixture
def forks(monkeypatch):
    """The processes the run forks (their pids), at one thread (a core left idle)."""
    made = []
    fork = beside.fork

    def counted():
        pid = fork()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(beside, "fork", counted)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield made
    torch.set_num_threads(threads)


def beside_and_here(fn, inputs, reference, rows):
    with beside.checks_process(True):
        there = support.later(fn, inputs, reference, rows=rows).get()
    return there, support.matrix(fn, inputs, reference, rows=rows)


def test_a_wrong_backward_gives_the_same_rows_beside_as_here(forks):
    there, here = beside_and_here(wrong.P3MissingFactor.apply, {"x": x43()},
                                  fns.legendre_p3_reference, support.CAPABILITIES)
    assert forks, "no process was forked"
    assert there == here
    assert there["backward"].status == "fails" and "Jacobian mismatch" in there["backward"].detail


def test_a_process_killed_in_a_row_fails_that_row_and_the_others_are_still_computed(forks):
    with beside.checks_process(True):  # here, it would end the tests' own process
        got = support.later(wrong.SquareKillsOnGaps.apply, {"x": x43()}, None,
                            rows=["backward", "noncontiguous", "float32"]).get()
    assert got["noncontiguous"] == support.Row(
        "fails", "the checks process ended (SIGKILL) during this row")
    assert got["backward"].status == got["float32"].status == "ok", got
    assert len(forks) >= 2  # the remaining row went to a new process


def test_a_function_that_cannot_be_pickled_is_checked_here(forks):
    class LocalSquare(torch.autograd.Function):  # a class in a function: no name to send
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    there, here = beside_and_here(LocalSquare.apply, {"x": x43()}, None, NO_COMPILE)
    assert there == here and not forks
    assert there["backward"].status == "ok"


def test_the_generator_is_the_callers_whether_the_matrix_ran_beside_or_here(forks):
    torch.manual_seed(5)
    untouched = torch.rand(3)
    results = {}
    for where in ("beside", "here"):
        with beside.checks_process(where == "beside"):
            # a first job: the process is forked now, with the generator as it is now
            support.later(wrong.SquarePlusNoise.apply, {"x": x43()}, rows=["float32"]).get()
            torch.manual_seed(5)
            rows = support.later(wrong.SquarePlusNoise.apply, {"x": x43()}, None,
                                 rows=["backward", "float32"]).get()
        results[where] = (rows, torch.rand(3))
    assert forks
    assert results["beside"][0] == results["here"][0]  # the same draws inside the rows
    assert results["beside"][0]["backward"].status == "fails"
    assert torch.equal(results["beside"][1], untouched)  # and none taken from the caller
    assert torch.equal(results["here"][1], untouched)


def test_a_run_says_the_same_with_and_without_the_checks_process(tmp_path, forks):
    runs = {}
    for on in ("true", "false"):
        runs[on] = run_captured(tmp_path / on, "--config", CONFIGS / "all.yaml", "--dry-run",
                                "--only", "legendre_fit,my_exp,custom_function",
                                "--set", f"checks_process={on}")
        assert runs[on].code == 0, runs[on].err
    assert len(forks) == 1  # one process forked by the run (the clone is its own child's)
    on, off = (runs[k].summary["scenarios"] for k in ("true", "false"))
    for a, b in zip(on, off):
        assert {k: v for k, v in a.items() if k != "timing"} == \
               {k: v for k, v in b.items() if k != "timing"}
        assert a["support"]
    lines = [ln.split()[1] for ln in runs["true"].out.splitlines() if ln.startswith("PASSED ")]
    assert lines == ["legendre_fit", "my_exp", "custom_function"]  # in config order


def test_a_run_from_python_keeps_its_matrices_in_its_own_process(tmp_path, forks):
    from demos import run

    r = run("my_exp", dry_run=True, output_dir=tmp_path, quiet=True)
    assert r.passed and r["my_exp"].support.status("MyExp", "backward") == "ok"
    assert not forks
