"""The generic helpers: recording without syncs, graphs, plots, files, an error in one line."""
import logging
from pathlib import Path

import pytest
import torch

from demos.lab.core.files import write_csv
from demos.lab.instruments import render as graphs
from demos.lab.pages import plots
from demos.lab.runner.context import Context, Shared
from demos.scenarios.legendre_fit import Config as LegendreFit
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.multiply_add import MultiplyAdd


def context(tmp_path, log_every=1):
    cfg = LegendreFit(id="t", log_every=log_every)
    return Context(cfg, tmp_path, logging.getLogger("t"), Shared(torch.device("cpu")))


def test_steps_times_the_loop_and_records_every_log_every_and_the_last(tmp_path):
    ctx = context(tmp_path, log_every=4)
    for t in ctx.steps(10):
        ctx.record(t, loss=torch.tensor(float(t)))
    assert ctx.steps_run == 10 and ctx.train_s > 0
    assert [r["step"] for r in ctx.history()] == [0, 4, 8, 9]
    assert ctx.last("loss") == 9.0


def test_record_keeps_no_tensor_alive_on_the_cpu(tmp_path):
    """On the CPU the finite check's .item() is what is kept: a float, no tensor, no graph."""
    ctx = context(tmp_path)
    x = torch.tensor(2.0, requires_grad=True)
    for t in ctx.steps(2):
        ctx.record(t, loss=x * 3)
    assert ctx._recorder.columns["loss"] == ([0, 1], [6.0, 6.0])
    assert ctx.history() == [{"step": 0, "loss": 6.0}, {"step": 1, "loss": 6.0}]


def test_record_on_an_accelerator_keeps_detached_tensors_until_history(tmp_path):
    ctx = context(tmp_path)
    # the accelerator path, on CPU tensors
    ctx._recorder.finite_every, ctx._recorder.finite_now = 100, False
    w = torch.tensor(1.0, requires_grad=True)
    for t in ctx.steps(3):
        ctx.record(t, loss=w * 2, w=w)
        kept = ctx._recorder.columns["loss"][1][0]  # in the loop: a tensor, not yet copied
        assert isinstance(kept, torch.Tensor) and not kept.requires_grad
        with torch.no_grad():
            w += 1  # an in-place update, as an optimizer does
    assert [r["w"] for r in ctx.history()] == [1.0, 2.0, 3.0]  # the value at each step
    assert [r["loss"] for r in ctx.history()] == [2.0, 4.0, 6.0]


def test_record_takes_scalars_only(tmp_path):
    ctx = context(tmp_path)
    with pytest.raises(ValueError, match=r"record\(loss=...\) takes scalars, got shape \(2,\)"):
        ctx.record(0, loss=torch.ones(2))


def test_record_always_and_same_step_merge(tmp_path):
    ctx = context(tmp_path, log_every=100)
    for t in ctx.steps(5):
        ctx.record(t, loss=1.0)
        if t == 2:
            ctx.record(t, always=True, accuracy=0.5)
    assert ctx.history() == [{"step": 0, "loss": 1.0}, {"step": 2, "accuracy": 0.5},
                             {"step": 4, "loss": 1.0}]


def test_graph_source_names_the_custom_backward_and_the_params():
    a = torch.tensor(1.0, requires_grad=True)
    x = torch.linspace(-1, 1, 5)
    src = graphs.make_graph(LegendrePolynomial3.apply(a * x).sum(), {"a": a})
    assert "LegendrePolynomial3Backward" in src and "AccumulateGrad" in src
    assert "a\n" in src and "lightblue" in src and "orange" in src  # leaf; saved tensor


def test_graph_of_a_custom_function_fails_after_backward_without_retain():
    """Why the scenarios draw their graphs before backward()."""
    w = torch.ones(2, requires_grad=True)
    out = MultiplyAdd.apply(w, torch.ones(2), torch.zeros(2, requires_grad=True)).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="freed|backward through the graph a second time"):
        graphs.make_graph(out, {"w": w})


def test_render_writes_gv_pdf_svg(tmp_path):
    if graphs.shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed")
    files, problem = graphs.render("digraph { a -> b }", tmp_path / "g")
    assert problem is None and [f.name for f in files] == ["g.gv", "g.pdf", "g.svg"]
    assert (tmp_path / "g.pdf").read_bytes().startswith(b"%PDF-")


def test_render_reports_a_broken_source_and_keeps_it(tmp_path):
    if graphs.shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed")
    files, problem = graphs.render("digraph { a -> ", tmp_path / "g")
    assert [f.name for f in files] == ["g.gv"] and "failed on g.gv" in problem


@pytest.mark.parametrize("values, log", [([461.0, 8.9], False), ([3e7, 3e-5], True),
                                         ([1.0, 0.0], False), ([float("nan"), 1e3, 1.0], True)])
def test_log_scale_when_the_loss_spans_more_than_two_decades(values, log):
    assert plots.wants_log_scale(values) is log


def test_loss_curve_is_a_png(tmp_path):
    plots.loss_curve(tmp_path / "loss.png", [0, 1, 2], [3e7, 1.0, 3e-5], title="t")
    assert (tmp_path / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == ["loss.png"]  # no temp file left


def test_csv_columns_in_order_of_first_appearance_blank_where_absent(tmp_path):
    write_csv(tmp_path / "m.csv", [{"step": 0, "loss": 1.5}, {"step": 1, "acc": 0.25}])
    assert (tmp_path / "m.csv").read_text() == "step,loss,acc\n0,1.5,\n1,,0.25\n"


def die_in_the_helper(path):
    """Kills the drawing helper (and only it); drawn inline, it writes its file."""
    import multiprocessing
    import os
    if multiprocessing.parent_process() is not None:
        os._exit(1)
    path.write_text("drawn here")


def test_a_helper_that_dies_loses_no_file(tmp_path):
    from demos.lab.pages import artifacts
    warnings = []
    work = artifacts.Artifacts(warnings.append)
    work.submit("a", die_in_the_helper, tmp_path / "a.txt")
    work.submit("b.png", plots.line_plot, tmp_path / "b.png", [0, 1], {"y": [1, 2]},
                title="t", xlabel="x", ylabel="y")
    work.wait()
    assert (tmp_path / "a.txt").read_text() == "drawn here"
    assert (tmp_path / "b.png").read_bytes().startswith(b"\x89PNG")
    assert warnings == []



def test_a_loop_that_uses_every_core_draws_only_when_it_is_done(tmp_path, monkeypatch):
    """Where torch's threads take every core, what the scenario submits before and during its
    loop is held until the loop ends (then drawn); with a core to spare, it is drawn at once."""
    import logging

    from demos.lab.pages.artifacts import Artifacts
    from demos.lab.runner import context

    def submitted_while_looping(cores: int) -> int:
        monkeypatch.setattr(context, "available_cores", lambda: cores)
        work = Artifacts(print)
        cfg = LegendreFit(scenario="legendre_fit", id="e")
        ctx = context.Context(cfg, tmp_path, logging.getLogger("t"),
                              context.Shared(torch.device("cpu"), artifacts=work))
        labels = {"title": "t", "xlabel": "x", "ylabel": "y"}
        ctx.plot("before.png", [0, 1], {"y": [1, 2]}, **labels)
        sent = []
        for t in ctx.steps(2):
            ctx.plot(f"during{t}.png", [0, 1], {"y": [1, 2]}, **labels)
            sent.append(len(work.pending))
        assert len(work.pending) == 3  # all handed to the helper once the loop is done
        work.wait()
        assert sorted(p.name for p in tmp_path.glob("*.png")) == [
            "before.png", "during0.png", "during1.png"]
        return max(sent)

    assert submitted_while_looping(cores=torch.get_num_threads()) == 0  # held
    assert submitted_while_looping(cores=torch.get_num_threads() + 1) == 3  # drawn at once


def test_a_file_that_cannot_be_written_is_a_warning(tmp_path):
    from demos.lab.pages import artifacts
    warnings = []
    work = artifacts.Artifacts(warnings.append)
    work.submit("x.png", plots.line_plot, tmp_path / "missing" / "x.png", [0, 1], {"y": [1, 2]},
                title="t", xlabel="x", ylabel="y")
    work.wait()
    assert len(warnings) == 1 and warnings[0].startswith("could not write x.png: ")


def test_last_names_what_was_never_recorded(tmp_path):
    ctx = Context(LegendreFit(id="t"), tmp_path, logging.getLogger("t"),
                  Shared(torch.device("cpu")))
    for t in ctx.steps(2):
        ctx.record(t, loss=1.0)
    assert ctx.last("loss") == 1.0
    with pytest.raises(KeyError, match="nothing recorded under 'accuracy'"):
        ctx.last("accuracy")


def test_an_index_that_cannot_be_written_leaves_the_run_whole(tmp_path, capsys):
    from tests.conftest import CONFIGS, run_main
    (tmp_path / "index.html").mkdir()  # in the way
    assert run_main(tmp_path, "--config", CONFIGS / "my_exp.yaml") == 0
    assert "warning: index.html not rebuilt ([Errno 21] Is a directory" in capsys.readouterr().err
    assert len(list(tmp_path.glob("*/summary.json"))) == 1


def test_a_status_only_worsens():
    from demos.lab.core.results import STATUSES, escalate

    order = ["passed", "failed", "error", "interrupted"]
    assert sorted(STATUSES) == sorted(order)
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            assert escalate(a, b) == order[max(i, j)], (a, b)


def test_dots_temp_files_are_named_as_remove_temps_knows_them(tmp_path):
    """A run killed outright while `dot` wrote leaves its temp files; the index removes them
    once the run is known gone, by the one temp-file pattern (they were `<name>.<pid>.tmp`,
    which it did not know)."""
    from demos.lab.core.files import TEMP_NAME

    seen, dot = tmp_path / "args", tmp_path / "dot"
    dot.write_text(f'#!/bin/sh\necho "$@" > {seen}\nexit 1\n')
    dot.chmod(0o755)
    graphs.render("digraph { a }", tmp_path / "g", str(dot))
    names = [Path(a[2:]).name for a in seen.read_text().split() if a.startswith("-o")]
    assert len(names) == 2 and all(TEMP_NAME.fullmatch(n) for n in names), names


def test_an_exception_is_one_line_with_its_type_cut_at_the_limit():
    from demos.lab.core.text import one_line

    class Unsayable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert one_line(ValueError("first line\n\n   second  line\n")) == \
        "ValueError: first line second line"
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert one_line(ValueError("x" * 500), 20) == "ValueError: xxxxx..."
    assert one_line(Unsayable()) == ("Unsayable: (its message could not be read: RuntimeError "
                                     "in its __str__)")
