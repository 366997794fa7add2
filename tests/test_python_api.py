"""The Python API (`from demos import run`): the command line's equal, in this process.

Same summary values as the CLI on the same config; config errors raise ConfigError with the
CLI's one line, nothing made; no exit, no signal handler or RNG state left changed; Ctrl-C stops
a run whole; check_function catches a wrong backward on a class defined here; every result
shows itself inline (_repr_html_) as self-contained, scoped HTML.
"""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest
import torch

import demos
from demos import ConfigError, check_function, load, run
from demos.lab.core.signals import SignalHandler, StopRequest
from tests.conftest import CONFIGS, cli, only_run_dir

MY_OPS = CONFIGS / "examples" / "my_ops.py"


def values(summary: dict) -> list:
    """What a run found, less when and how long: entries' status, metrics, params, checks."""
    return [(e["id"], e["status"], e["metrics"], e["params"],
             [(c["name"], c["passed"], c["detail"]) for c in e["checks"]], e.get("support"))
            for e in summary["scenarios"]]


def test_importing_demos_loads_no_torch_and_no_machinery():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, demos; print(sorted(m for m in "
                          "sys.modules if m.startswith(('torch', 'demos.'))))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['demos.lab', 'demos.lab.core']"  # the packages alone: `lazily`
    assert "run" in dir(demos) and "check_function" in dir(demos)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        demos.nope  # noqa: B018


def test_run_gives_what_the_command_line_gives(tmp_path):
    """my_exp by name (configs/my_exp.yaml) in the API and in the CLI: the same values."""
    r = run("my_exp", output_dir=tmp_path / "api", quiet=True)
    code, _, _ = cli("my_exp", "--no-progress", "--output-dir", tmp_path / "cli")
    assert (r.exit_code, code) == (0, 0) and r.passed is True and r.status == "passed"
    by_cli = load(only_run_dir(tmp_path / "cli"))
    assert values(r.summary.to_json()) == values(by_cli.summary.to_json())
    import json
    on_disk = json.loads((r.folder / "summary.json").read_text())
    assert values(on_disk) == values(r.summary.to_json())  # the result is summary.json's
    assert r.summary.command == ["demos.run('my_exp', output_dir=" + repr(str(tmp_path / "api"))
                                 + ")"]  # the call, as made
    e = r["my_exp"]
    assert e is not None and r[0].id == "my_exp" and e.folder == r.folder / "my_exp"
    assert set(e.graphs) == {"graph", "graph_saves_input", "forward_mode"}
    assert len(e.graphs["graph"].steps) == 2 and e.graphs["graph"].files
    assert e.support.status("MyExp", "forward_ad") == "unsupported"
    assert e.backward["graphs"] and r.report.is_file() and not r.failures
    with pytest.raises(KeyError, match="no entry of that id"):
        r["nope"]


def test_keys_and_set_reach_the_config(tmp_path):
    r = run("legendre_fit", lr=1e-5, set={"seed": 3}, dry_run=True, output_dir=tmp_path,
            quiet=True, run_name="fast")
    assert r.folder.name == "fast" and r.summary.seed == 3 and r.summary.dry_run
    assert r.summary.sets == ["scenarios[0].lr=1.0e-05", "seed=3"]
    assert "lr: 1.0e-05" in r.configs()["legendre_fit"]
    # the config's data itself, and a scenario's defaults where no config names it
    r = run({"scenarios": [{"scenario": "my_exp", "id": "mine"}]}, dry_run=True,
            output_dir=tmp_path, quiet=True)
    assert [e.id for e in r.entries] == ["mine"] and r.summary.config == "<config from Python>"


@pytest.mark.parametrize("call, argv", [
    (lambda out: run("legendre_fit", lrr=1, output_dir=out),
     ["legendre_fit", "--set", "scenarios[0].lrr=1"]),
    (lambda out: run("legendre_fi", output_dir=out), ["legendre_fi"]),
    (lambda out: run("nothere.yaml", output_dir=out), ["--config", "nothere.yaml"]),
    (lambda out: run("my_exp", device="cuda:7", output_dir=out),
     ["my_exp", "--device", "cuda:7"]),
    (lambda out: run("my_exp", only=["nope"], output_dir=out), ["my_exp", "--only", "nope"]),
    (lambda out: run("my_exp", set={"seed": "x"}, output_dir=out),
     ["my_exp", "--set", "seed=x"]),
])
def test_a_config_error_raises_the_command_lines_message(tmp_path, call, argv):
    if "cuda:7" in argv and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(ConfigError) as raised:
        call(tmp_path / "api")
    code, _, err = cli(*argv, "--output-dir", tmp_path / "cli")
    assert code == 2 and err == f"error: {raised.value}\n"
    assert not (tmp_path / "api").exists() or not any((tmp_path / "api").iterdir())


def test_keys_of_a_config_of_several_entries_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"lr=: .*all.yaml has 9 entries; name one: "
                                          r"set=\{'scenarios.<id>.lr': \.\.\.\}"):
        run(CONFIGS / "all.yaml", lr=1e-5, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="--set seed: a value of type object is not config data"):
        run("my_exp", set={"seed": object()}, output_dir=tmp_path)


def test_the_callers_process_is_left_as_it_was(tmp_path):
    """No handler left installed, torch's RNG where it was, no exit (SystemExit)."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    r = run("my_exp", dry_run=True, output_dir=tmp_path, quiet=True)
    assert torch.equal(torch.rand(3), expected)  # the run's seeding did not reach us
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert r.passed and torch.get_default_dtype() == torch.float32


def test_ctrl_c_stops_the_run_whole_and_raises(tmp_path):
    """A SIGINT while the run's own handler is in: the run stops at a step boundary, its
    summary says interrupted, and RunInterrupted (a KeyboardInterrupt) carries the result."""
    def interrupt_once_running():
        deadline = time.monotonic() + 60
        while not isinstance(signal.getsignal(signal.SIGINT), SignalHandler) or not any(
                "training: steps" in p.read_text() for p in tmp_path.glob("*/run.log")):
            if time.monotonic() > deadline:  # the run's handler in, and its loop begun
                return
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # as a notebook's interrupt does

    before = signal.getsignal(signal.SIGINT)  # ignored in a suite started in the background
    threading.Thread(target=interrupt_once_running, daemon=True).start()
    with pytest.raises(demos.RunInterrupted) as raised:
        run("legendre_fit", steps=10**7, output_dir=tmp_path, quiet=True)
    result = raised.value.result
    assert isinstance(raised.value, KeyboardInterrupt) and result.status == "interrupted"
    assert load(result.folder).status == "interrupted" and result.report.is_file()
    assert 0 < result["legendre_fit"].summary.steps < 10**7
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_again_raises_instead_of_ending_the_process():
    stop = StopRequest()
    stop.embedded, stop.phase = True, "running"
    handler = SignalHandler(stop, hard_exit=lambda code: pytest.fail("exited"))
    handler(signal.SIGINT, None)
    assert stop.requested == "SIGINT" and stop.signals == (signal.SIGINT,)
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)


def test_check_function_on_classes_defined_here(tmp_path):
    """A right Function passes; one whose backward forgets a factor fails gradcheck and
    parity; both are classes of this test (no file names them)."""
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * g * x ** 2

    class CubeMissingFactor(Cube):
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * x ** 2

    def cube(x):
        return x ** 3

    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    ok = check_function(Cube, inputs={"x": x}, reference=cube, support=["backward", "vmap"],
                        output_dir=tmp_path, quiet=True)
    assert ok.passed and ok["Cube"].support.status("Cube", "vmap") == "unsupported"
    names = {c.name for c in ok.checks}
    assert {"gradcheck", "parity with the reference"} <= names
    assert "graph" in ok["Cube"].graphs
    assert re.search(r"\nfunction: \S*test_python_api\S*:Cube\n",  # a class of a function
                     ok.configs()["Cube"])
    wrong = check_function(CubeMissingFactor, inputs=[x], reference=cube, support=[],
                           output_dir=tmp_path, quiet=True)
    assert not wrong.passed and wrong.exit_code == 1
    assert {c.name for c in wrong.failures} == {"gradcheck", "parity with the reference"}


class Doubled(torch.autograd.Function):
    """2x, with arguments it does not differentiate: an index tuple and an array."""
    seen: list = []

    @staticmethod
    def forward(ctx, x, index, array):
        Doubled.seen.append((len(index), type(array).__name__))
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g, None, None


def test_check_function_records_a_long_value_by_what_it_is(tmp_path):
    """Issue 44: a value of 10^6 numbers was written into config.yaml, run.log and the report
    (22 MB each); an array could not be written at all (yaml's RepresenterError). Both are
    recorded by what they are; the run uses them as given."""
    import numpy as np

    Doubled.seen.clear()
    r = check_function(Doubled, inputs={"x": torch.ones(3, dtype=torch.float64,
                                                         requires_grad=True),
                                        "index": tuple(range(10**5)), "array": np.ones(4)},
                       support=[], output_dir=tmp_path, quiet=True)
    assert r.passed and Doubled.seen[0] == (10**5, "ndarray")
    config = (r.folder / "config.yaml").read_text()
    assert "value: '<tuple of 100000 items, given to check_function>'" in config
    assert "value: '<ndarray of shape [4], given to check_function>'" in config
    assert max(p.stat().st_size for p in r.folder.rglob("*") if p.is_file()) < 100_000


def test_check_function_takes_the_configs_input_specs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(MY_OPS.parent))
    import my_ops
    r = check_function(my_ops.MyCube, inputs=[{"shape": [5, 3]}, {"shape": [3]},
                                               {"value": [0.1, 0.2, 0.3],
                                                "requires_grad": False}],
                       reference=my_ops.cube, support=[], output_dir=tmp_path, quiet=True)
    assert r.passed and [e.id for e in r.entries] == ["MyCube"]
    with pytest.raises(ConfigError, match=r"inputs\[0\]: give either shape"):
        check_function(my_ops.MyCube, inputs=[{}], output_dir=tmp_path)


def self_contained(html: str) -> None:
    """One box; styles scoped to it; every image inside; nothing from the network."""
    assert html.startswith('<div class="autograd-demos" id="ad-') and html.endswith("</div>")
    style = re.search(r"<style>(.*?)</style>", html, re.S)[1]
    for rule in re.findall(r"([^{}]+)\{", style):
        assert all(s.strip().startswith(".autograd-demos") for s in rule.split(",")), rule
    assert all(src.startswith("data:") for src in re.findall(r'<img[^>]* src="([^"]*)"', html))
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_every_result_shows_itself_inline(dry_run):
    r = load(dry_run.dir)
    seen = set()
    for view in [r, r["legendre_fit"], r["my_exp"].graphs["graph"], r["my_exp"].support]:
        html = view._repr_html_()
        self_contained(html)
        seen.add(re.match(r'<div class="autograd-demos" id="(ad-\w+)"', html)[1])
    assert len(seen) == 4  # each view its own box: two steppers never share one
    stepper = r["my_exp"].graphs["graph"]._repr_html_()
    assert 'class="backward"' in stepper and "document.currentScript" in stepper
    entry = r["legendre_fit"]._repr_html_()
    assert re.search(r'<img src="data:image/png;base64,', entry)  # loss.png, embedded
    assert 'href="' in entry and "<script>" not in r["my_exp"].support._repr_html_()
    assert repr(r).startswith("<run ") and "PASSED" in repr(r["my_exp"])


def test_the_callers_torch_settings_do_not_reach_the_run(tmp_path):
    """Inside no_grad, after set_default_dtype(float64): the run runs as from the command
    line (float32, grad on), the same numbers; the caller's settings are back afterwards."""
    plain = run("legendre_fit", dry_run=True, output_dir=tmp_path, quiet=True)
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            inside = run("legendre_fit", dry_run=True, output_dir=tmp_path, quiet=True)
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert inside.passed and values(inside.summary.to_json()) == values(plain.summary.to_json())


def test_two_threads_run_one_after_the_other(tmp_path):
    """Runs share torch's settings and stdout: a second thread's run waits for the first."""
    import sys
    stdout, results = sys.stdout, []

    def one():
        results.append(run("my_exp", dry_run=True, output_dir=tmp_path, quiet=True))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.passed for r in results] == [True, True] and sys.stdout is stdout
    first, second = sorted(results, key=lambda r: r.summary.started)
    assert first.folder != second.folder


@pytest.mark.parametrize("target", ["--help", "-h", "run", "--list"])
def test_the_command_lines_words_are_not_targets(target, tmp_path):
    with pytest.raises(ConfigError, match=f"run: {target}: not a scenario or a config file"):
        run(target, output_dir=tmp_path)


@pytest.mark.parametrize("call, message", [
    (lambda out: run("my_exp", only=3, output_dir=out), "only: an entry's id or a list"),
    (lambda out: run("my_exp", set=None, output_dir=out), "set: a mapping of KEY: VALUE"),
    (lambda out: run("my_exp", output_dir=f"{out}/x\0y"), "--output-dir: .* NUL character"),
    (lambda out: load(None), "load: expected text or a path, got NoneType"),
    (lambda out: check_function(None, inputs=[1.0], output_dir=out),
     "check_function: None is not a torch.autograd.Function subclass"),
    (lambda out: check_function(torch.autograd.Function, inputs=[torch.tensor([1 + 1j])],
                                output_dir=out), r"inputs\[0\]: a complex tensor"),
])
def test_wrong_arguments_are_config_errors(call, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        call(tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_value_may_start_with_a_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("my_exp", dry_run=True, output_dir="-out", quiet=True)
    assert r.folder.parent == tmp_path / "-out" and r.passed


def test_check_function_checks_the_very_object_given(tmp_path, monkeypatch):
    """A class of a module beside the working directory, changed after its import: the
    changed one is checked (not the file imported again), and the config names it."""
    import sys
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(MY_OPS.parent))
    import my_ops
    monkeypatch.setattr(my_ops.MyCube, "backward",
                        staticmethod(lambda ctx, g: (g * 0, None, None)))
    inputs = [{"shape": [5, 3]}, {"shape": [3]}, {"value": [0.1, 0.2, 0.3],
                                                  "requires_grad": False}]
    r = check_function(my_ops.MyCube, inputs=inputs, support=[], output_dir="o", quiet=True)
    assert not r.passed and "gradcheck" in {c.name for c in r.failures}
    assert "function: my_ops:MyCube\n" in r.configs()["MyCube"]
    assert "demos_objects" not in sys.modules


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """The drawing helper starts with no main module to run again: a script that calls run()
    at its top level (no `if __name__ == "__main__":`) prints its first line once."""
    import subprocess
    import sys
    script = tmp_path / "script.py"
    script.write_text("print('top level', flush=True)\nfrom demos import run\n"
                      "r = run('legendre_fit', dry_run=True, output_dir='o', quiet=True)\n"
                      "print(r.passed, (r.folder / 'legendre_fit' / 'loss.png').is_file())\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout == "top level\nTrue True\n", done.stderr
    assert "Traceback" not in done.stderr


def test_a_view_without_its_scripts_still_shows_its_graph(dry_run):
    """What a notebook that is not trusted keeps: no scripts, styles or inline SVG. Each graph
    is then a data: picture, and none of its labels is left as stray text."""
    html = load(dry_run.dir)["my_exp"].graphs["graph"]._repr_html_()
    untrusted = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
    assert "<svg" not in untrusted and "MyExpBackward" not in untrusted
    assert len(re.findall(r'<img class="ad-picture"[^>]* src="data:image/svg\+xml;base64,',
                          untrusted)) == 1
    assert "MyExpBackward" in html  # the markup the script puts in place, when it runs


def test_graph_draws_steps_and_ledgers_your_own_tensors_as_a_scenarios(tmp_path):
    """demos.graph(loss, names): the instruments a scenario's ctx.graph runs, on tensors of
    your own (the same code, demos.lab.runner.looking): the drawing, the traced backward
    (the leaves' .grad left alone, so your own backward still works), what it saved, the
    walk, and the inline view with its stepper."""
    import math

    from demos import graph

    x = torch.linspace(-math.pi, math.pi, 20)
    a, b = (torch.tensor(v, requires_grad=True) for v in (0.5, -1.0))
    loss = ((a + b * x) - torch.sin(x)).pow(2).sum()
    g = graph(loss, {"a": a, "b": b}, name="fit", output_dir=tmp_path)
    assert g.folder.parent == tmp_path and g.folder.name.startswith("graph_")
    assert {f.name for f in g.files} == {f"fit{k}{e}" for k in ("", "_grads")
                                         for e in (".svg", ".pdf", ".gv")}
    types = [s["type"] for s in g.steps]
    assert types[0] == "SumBackward0" and types.count("AccumulateGrad") == 2
    assert g.checks == []  # its trace is held to the leaves' .grad by the tests, not here
    assert a.grad is None and b.grad is None  # left as found
    assert g.saved["total_bytes"] > 0 and "#1 SumBackward0" in g.explanation
    html = g._repr_html_()
    assert 'class="backward" data-graph="fit"' in html and "backward runs against them" in html
    loss.backward()  # what the graph saved is still there for your own backward
    assert a.grad is not None


@pytest.mark.parametrize("args, words", [
    ((3.0,), "graph: 3.0 is not a tensor or a tuple of tensors"),
    ((torch.ones(2), {"a": 1}), "graph: names['a']: names map a name to a tensor"),
    ((torch.ones(2), None, "../up"), "graph: name '../up': must be a folder-safe file name"),
])
def test_graph_refuses_what_is_no_graph_in_one_line(tmp_path, args, words):
    from demos import ConfigError, graph

    output, names, *name = args + (None,) * (2 - len(args))
    with pytest.raises(ConfigError) as e:
        graph(output, names, **({"name": name[0]} if name and name[0] else {}),
              output_dir=tmp_path)
    assert str(e.value).startswith(words), str(e.value)
    assert not any(tmp_path.iterdir())  # nothing written


def test_forward_mode_steps_your_own_functions_jvp(tmp_path):
    """demos.forward_mode(run, inputs): a scenario's ctx.forward_mode on your own Function:
    each operation's tangent, J·v held to torch.func.jvp, its view with a stepper."""
    from demos import ConfigError, forward_mode
    from demos.documents.functions import LegendrePolynomial3Modern

    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64).requires_grad_()
    f = forward_mode(LegendrePolynomial3Modern.apply, {"x": x}, output_dir=tmp_path)
    assert f.folder.name.startswith("forward_mode_") and f.steps
    assert "tangent" in f.steps[0] and [c.passed for c in f.checks] == [True]
    assert "J·v" in f.explanation and "forward mode" in f._repr_html_()
    with pytest.raises(ConfigError, match="forward_mode: no inputs"):
        forward_mode(LegendrePolynomial3Modern.apply, {}, output_dir=tmp_path)


@pytest.mark.parametrize("edit, problem", [
    (lambda d: d.update(status=5), "status: must be a non-empty string, got 5"),
    (lambda d: d.update(status="great"), "top level: status 'great' is no run's"),
    (lambda d: d["scenarios"][0].update(id="../../x"), "scenarios[0].id: '../../x' is no "
                                                       "entry's id"),
    (lambda d: d["scenarios"][0].update(status="great"), "scenarios[0].status: 'great' is no "
                                                         "entry's status"),
    (lambda d: d["scenarios"][0]["metrics"].update(x="abc"), "scenarios[0].metrics.x: must "
                                                             "be a number, got 'abc'"),
    # issue 44: blocks that other modules write, typed as they write them; each of these
    # loaded, and the display raised (jinja2's UndefinedError, AttributeError)
    (lambda d: d["scenarios"][0].update(support={"F": {"backward": {}}}),
     "scenarios[0].support.F.backward.status: missing (required)"),
    (lambda d: d["scenarios"][0]["checks"][0].update(diagnosis={
        "kind": "factor", "says": "s", "output": "y", "input": "x", "elements": [1, 2],
        "probe": "grad_output"}), "scenarios[0].checks[0].diagnosis.elements[0]: must be a "
                                  "mapping of keys to values, got 1"),
    (lambda d: d.update(baseline={"file": "b.yaml", "status": "passed", "compared": 1,
                                  "drift": [1, 2], "only_in_baseline": [], "not_run": [],
                                  "not_in_baseline": []}),
     "baseline.drift[0]: must be a mapping, got 1"),
    (lambda d: d.update(baseline={"file": "b.yaml", "status": "passed", "compared": 1,
                                  "drift": [], "only_in_baseline": [], "not_run": [],
                                  "not_in_baseline": [], "from": "x"}),
     "baseline.from: must be a mapping, got 'x'"),
    (lambda d: d["determinism"].update(threads=[1, 2]),
     "determinism.threads: must be int or str, got [1, 2]"),
    (lambda d: d.update(world={"size": "x", "backend": "gloo"}),
     "world.size: must be an integer, got 'x'"),
    (None, "nested too deeply"),
])
def test_load_refuses_a_hand_edited_summary(tmp_path, edit, problem):
    """As the index leaves such folders out: a ConfigError naming the folder and the value,
    not a result whose repr raises or whose files lie outside its run folder."""
    r = run("my_exp", dry_run=True, support=[], output_dir=tmp_path, quiet=True)
    path = r.folder / "summary.json"
    if edit is None:
        path.write_text("[" * 100000 + "]" * 100000)
    else:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        load(r.folder)
    assert str(e.value) == f"{path}: not a run's summary ({problem})"


class Halved(torch.autograd.Function):
    """x² with half its gradient: a failed gradcheck, with its diagnosis."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * x


def paths(data, at=()):
    """Every key and index of JSON `data`, as paths from its top."""
    items = data.items() if isinstance(data, dict) else enumerate(data) \
        if isinstance(data, list) else ()
    for k, v in items:
        yield (*at, k)
        yield from paths(v, (*at, k))


@pytest.mark.slow
def test_a_loaded_run_always_displays(tmp_path):
    """Every value of a summary.json with every block (a baseline's drift, a diagnosis, a
    support matrix) replaced by one of another type: `load` refuses it, naming the file and
    the key, or the run it gives is displayed (its repr and HTML, its entries', the index)."""
    from demos.lab.pages.index import write_index

    r = check_function(Halved, inputs={"x": {"shape": [3]}}, support=["backward", "vmap"],
                       output_dir=tmp_path / "out", quiet=True)
    path = r.folder / "summary.json"
    data = json.loads(path.read_text())
    data["baseline"] = {"file": "b.yaml", "status": "failed", "compared": 1, "drift": [{
        "entry": "Halved", "key": "metrics.x", "old": 1.0, "new": "nan", "diff": None,
        "allowed": 0.1, "within": False, "tier": "exact", "rule": "rtol 0"}],
        "only_in_baseline": ["a"], "not_run": ["b"], "not_in_baseline": ["c"], "from": {
        "run": "r", "seed": 0}, "fingerprint": None, "same_machine": False, "differs": "d",
        "measured": False}
    data["world"] = {"size": 2, "backend": "gloo"}
    assert any("diagnosis" in c for c in data["scenarios"][0]["checks"])
    path.write_text(json.dumps(data))
    load(r.folder)._repr_html_()  # whole, it is displayed
    for at in paths(data):
        for value in ([1, 2], "x", 5, None, {}, {"a": 1}, True):
            edited = json.loads(json.dumps(data))
            *parent, key = at
            place = edited
            for k in parent:
                place = place[k]
            place[key] = value
            path.write_text(json.dumps(edited))
            try:
                loaded = load(r.folder)
            except ConfigError as e:
                assert str(e).startswith(f"{path}: not a run's summary ("), (at, value, e)
                continue
            repr(loaded), loaded._repr_html_()
            for e in loaded.entries:
                repr(e), e._repr_html_(), repr(e.support)
            write_index(tmp_path / "out")


def test_load_reads_an_older_runs_summary(tmp_path):
    """An older run's timing also held the steps its loop did (for a resume that is gone)."""
    r = run("legendre_fit", dry_run=True, support=[], output_dir=tmp_path, quiet=True)
    path = r.folder / "summary.json"
    data = json.loads(path.read_text())
    data["scenarios"][0]["timing"]["steps"] = 5
    path.write_text(json.dumps(data))
    timing, before = load(r.folder).summary.scenarios[0].timing, r.summary.scenarios[0].timing
    assert (timing.train_s, timing.steps_per_s) == (before.train_s, before.steps_per_s)


NESTED: dict = {}  # where NestsARun's inner run goes, and its result


class NestsARun(torch.autograd.Function):
    """A Function whose forward runs a whole quiet run once (issue 36)."""

    @staticmethod
    def forward(ctx, x):
        if "result" not in NESTED:
            NESTED["result"] = demos.run("my_exp", dry_run=True, quiet=True,
                                         output_dir=NESTED["dir"])
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def test_a_quiet_run_inside_a_run_says_nothing_in_the_outer_ones_console_or_log(tmp_path,
                                                                                 capsys):
    NESTED.clear()
    NESTED["dir"] = tmp_path / "inner"
    r = demos.check_function(NestsARun, inputs={"x": {"shape": [3]}}, support=[],
                             output_dir=tmp_path / "outer")
    assert r.passed and NESTED["result"].passed
    out = capsys.readouterr().out
    assert "my_exp" not in out and "NestsARun" in out  # the outer run's lines, only
    log = (r.folder / "run.log").read_text()
    assert "my_exp" not in log and "start NestsARun" in log
    assert "start my_exp" in (NESTED["result"].folder / "run.log").read_text()


def test_load_of_an_output_folder_gives_every_run_oldest_first(tmp_path):
    """A seed loop's runs read back for a table (demos/docs/many-runs.md): every run of the
    folder, oldest first, each with its overrides; a folder no run wrote is left out."""
    for seed in (2, 0):
        run("my_exp", seed=seed, dry_run=True, support=[], output_dir=tmp_path, quiet=True,
            run_name=f"seed{seed}")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "summary.json").write_text("{}")
    runs = load(tmp_path)
    assert sorted(r.folder.name for r in runs) == ["seed0", "seed2"]
    started = [r.summary.started for r in runs]
    assert started == sorted(started)  # in one second: then by name
    by_name = {r.folder.name: r for r in runs}
    assert by_name["seed2"].summary.seed == 2
    assert by_name["seed0"].summary.sets == ["scenarios[0].support=[]", "seed=0"]
    assert [r.status for r in runs] == ["passed", "passed"]
    assert "max_grad_error" in runs[0]["my_exp"].metrics
