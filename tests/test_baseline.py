"""--save-baseline and --baseline: values saved, compared within tolerances, drift named."""
import contextlib
import io

import pytest
import yaml

from demos.lab.core.tolerance import Drift, Tolerance, rule_for
from tests.conftest import CONFIGS, check, cli, entry, run_captured, run_main

# legendre_fit alone, tiny and without its support matrices: a run in a fraction of a second
FIT = ("--config", CONFIGS / "legendre_fit.yaml", "--dry-run", "--device", "cpu",
       "--set", "scenarios.legendre_fit.support=[]")


def save(tmp_path, out="saved"):
    path = tmp_path / "base.yaml"
    run = run_captured(tmp_path / out, *FIT, "--save-baseline", path)
    assert run.code == 0, run.out + run.err
    return path, run


def edit(path, change):
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_saved_baseline_holds_the_run_and_a_second_run_matches_it(tmp_path):
    path, first = save(tmp_path)
    data = yaml.safe_load(path.read_text())
    fit = entry(first.summary, "legendre_fit")
    assert data["scenarios"]["legendre_fit"]["params"] == fit["params"]  # exact floats
    assert data["scenarios"]["legendre_fit"]["metrics"] == fit["metrics"]
    assert data["dry_run"] is True and data["device"] == "cpu" and data["seed"] == 0
    assert path.read_text().startswith("# autograd-demos baseline")
    again = run_captured(tmp_path / "again", *FIT, "--baseline", path)
    assert again.code == 0, again.out + again.err
    c = check(entry(again.summary, "legendre_fit"), "baseline")
    assert c["passed"] and "5 value(s) within tolerance" in c["detail"]
    assert "identical" in c["detail"]


def test_drift_beyond_tolerance_fails_naming_old_new_and_difference(tmp_path):
    path, first = save(tmp_path)
    b = entry(first.summary, "legendre_fit")["params"]["b"]
    edit(path, lambda d: d["scenarios"]["legendre_fit"]["params"].update(b=b * 1.001))
    edit(path, lambda d: d["scenarios"]["legendre_fit"]["metrics"].update(
        final_loss=d["scenarios"]["legendre_fit"]["metrics"]["final_loss"] * (1 + 1e-8)))
    run = run_captured(tmp_path / "drift", *FIT, "--baseline", path)
    assert run.code == 1
    c = check(entry(run.summary, "legendre_fit"), "baseline params.b")
    assert c["passed"] is False
    assert f"old {b * 1.001:.10g}, new {b:.10g}, diff" in c["detail"] and "allowed" in c["detail"]
    assert "FAIL baseline params.b: old" in run.out
    drift = run.summary["baseline"]["drift"]  # what moved, worst first: b out, the loss within
    assert [(d["key"], d["within"]) for d in drift] == [("params.b", False),
                                                        ("metrics.final_loss", True)]
    html = (run.dir / "report.html").read_text()
    assert 'class="drift"' in html and "params.b" in html and ">OUT<" in html


def test_tolerances_from_the_file_and_the_config_by_key(tmp_path):
    path, first = save(tmp_path)
    b = entry(first.summary, "legendre_fit")["params"]["b"]
    edit(path, lambda d: d["scenarios"]["legendre_fit"]["params"].update(b=b * 1.001))
    edit(path, lambda d: d["scenarios"]["legendre_fit"].update(
        tolerance={"params.b": {"rtol": 1e-2}}))
    assert run_captured(tmp_path / "file", *FIT, "--baseline", path).code == 0
    # the config's key wins over the file's: tighter again, fails
    tight = run_captured(tmp_path / "cfg", *FIT, "--baseline", path, "--set",
                         "scenarios.legendre_fit.tolerance={params.b: {rtol: 1.0e-5}}")
    assert tight.code == 1 and "rtol 1e-05" in check(entry(tight.summary, "legendre_fit"),
                                                      "baseline params.b")["detail"]
    # saving again keeps the file's tolerances
    save(tmp_path, "resaved")
    assert yaml.safe_load(path.read_text())["scenarios"]["legendre_fit"]["tolerance"] == {
        "params.b": {"rtol": 1e-2}}


def test_tolerance_lookup_most_specific_key_first():
    tables = [{"params": Tolerance(rtol=0.1)},
              {"params.b": Tolerance(atol=0.5), "all": Tolerance(rtol=9, atol=9)}]
    rule = rule_for("params.b", tables, same_machine=True)
    assert (rule.tier, rule.rtol, rule.atol) == ("set", 0.1, 0.5)
    rule = rule_for("metrics.x", tables, same_machine=True)
    assert (rule.rtol, rule.atol) == (9, 9)
    rule = rule_for("metrics.x", [], same_machine=True)
    assert (rule.rtol, rule.atol) == (1e-6, 1e-9)
    rule = rule_for("metrics.x", [], same_machine=True, cpu=False)
    assert (rule.rtol, rule.atol) == (1e-4, 1e-6)
    nan = float("nan")
    same = rule_for("metrics.x", [], same_machine=True)
    assert Drift("e", "metrics.x", nan, nan, same).within
    assert not Drift("e", "metrics.x", 1.0, nan, same).within
    assert not Drift("e", "metrics.x", None, 1.0, same).within


def test_entries_on_one_side_only_are_named(tmp_path):
    path, _ = save(tmp_path)
    edit(path, lambda d: d["scenarios"].update(ghost={"metrics": {"x": 1.0}}))
    run = run_captured(tmp_path / "ghost", *FIT, "--baseline", path)
    assert run.code == 1 and run.summary["baseline"]["only_in_baseline"] == ["ghost"]
    assert "ghost: in the baseline, not in this config" in run.out
    edit(path, lambda d: d.update(scenarios={"ghost": {"metrics": {"x": 1.0}}}))
    run = run_captured(tmp_path / "new", *FIT, "--baseline", path)
    c = check(entry(run.summary, "legendre_fit"), "baseline")
    assert run.code == 1 and c["passed"] is False and "not in" in c["detail"]


def test_entries_left_out_by_only_are_noted_not_failed(tmp_path):
    base = tmp_path / "all.yaml"
    run = run_captured(tmp_path / "two", "--config", CONFIGS / "all.yaml", "--dry-run",
                       "--only", "computation_graph,autograd_internals", "--save-baseline", base)
    assert run.code == 0
    one = run_captured(tmp_path / "one", "--config", CONFIGS / "all.yaml", "--dry-run",
                       "--only", "computation_graph", "--baseline", base)
    assert one.code == 0, one.out
    assert one.summary["baseline"]["not_run"] == ["autograd_internals"]


def refused(output_dir, *args):
    """Run what must be refused before any work; return (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run_main(output_dir, *args)
    return code, err.getvalue()


def test_bad_baselines_are_one_line_errors(tmp_path):
    path, _ = save(tmp_path)
    (tmp_path / "notbase.yaml").write_text("seed: 3\n")
    for name, words in {"nope.yaml": "no such file", "notbase.yaml": "not a baseline"}.items():
        code, err = refused(tmp_path / name, *FIT, "--baseline", tmp_path / name)
        assert code == 2 and words in err and err.count("\n") == 1, err
    edit(path, lambda d: d["scenarios"]["legendre_fit"].update(tolerance={"params.z": {"rtol": 1}}))
    code, err = refused(tmp_path / "key", *FIT, "--baseline", path)
    assert code == 2 and "scenarios.legendre_fit.tolerance.params.z: not a value" in err, err
    edit(path, lambda d: d["scenarios"]["legendre_fit"].pop("tolerance"))
    code, err = refused(tmp_path / "full", *FIT[:2], *FIT[3:], "--baseline", path)
    assert code == 2 and "saved from a --dry-run, this is a full run" in err, err
    code, err = refused(tmp_path / "dir", *FIT, "--save-baseline", tmp_path)
    assert code == 2 and "is a directory" in err
    code, err = refused(tmp_path / "cfg", *FIT, "--set",
                        "scenarios.legendre_fit.tolerance={metrics.los: {rtol: 1}}")
    assert code == 2 and "did you mean 'metrics.final_loss'" in err, err
    for name in ("nope.yaml", "notbase.yaml", "key", "full", "dir", "cfg"):
        assert not (tmp_path / name).is_dir()  # refused before any run folder


def test_saving_over_another_file_or_a_partial_run_keeps_what_it_must(tmp_path):
    config = tmp_path / "fit.yaml"
    config.write_text((CONFIGS / "legendre_fit.yaml").read_text())
    code, err = refused(tmp_path / "over", "--config", config, "--dry-run",
                        "--save-baseline", config)
    assert code == 2 and "is the config being run" in err
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, err = refused(tmp_path / "notes", *FIT, "--save-baseline", notes)
    assert code == 2 and "exists and is not a baseline" in err and notes.read_text() == "my notes\n"
    # a baseline of two entries, re-saved from a run of one (--only): the other stays
    path = tmp_path / "two.yaml"
    two = ("--config", CONFIGS / "all.yaml", "--dry-run", "--only")
    assert run_captured(tmp_path / "a", *two, "computation_graph,autograd_internals",
                        "--save-baseline", path).code == 0
    loose = {"all": {"rtol": 0.5}}
    edit(path, lambda d: d["scenarios"]["autograd_internals"].update(tolerance=loose))
    run = run_captured(tmp_path / "b", *two, "computation_graph", "--save-baseline", path)
    assert "kept from before (not run): autograd_internals" in run.out
    kept = yaml.safe_load(path.read_text())["scenarios"]["autograd_internals"]
    assert kept["tolerance"] == {"all": {"rtol": 0.5}} and kept["metrics"]["e"] == 20.0


def test_a_single_run_baseline_is_exact_to_its_machine_and_says_so_elsewhere(tmp_path):
    path, first = save(tmp_path)
    text = path.read_text()
    assert "exact to one machine" in text and "fingerprint:" in text
    assert yaml.safe_load(text)["fingerprint"] == first.summary["fingerprint"]
    b = entry(first.summary, "legendre_fit")["params"]["b"]
    edit(path, lambda d: d["scenarios"]["legendre_fit"]["params"].update(b=b * (1 + 3e-6)))
    same = run_captured(tmp_path / "same", *FIT, "--baseline", path)  # same machine: 1e-6
    assert same.code == 1 and "same machine: rtol 1e-06" in check(
        entry(same.summary, "legendre_fit"), "baseline params.b")["detail"]
    edit(path, lambda d: d["fingerprint"].update(capability="SVE256", threads=8))
    other = run_captured(tmp_path / "other", *FIT, "--baseline", path)  # elsewhere: 1e-5
    assert other.code == 0, other.out
    mine = first.summary["fingerprint"]["capability"]
    assert f"not the baseline's machine (baseline: SVE256, 8 threads; this run: {mine}, 1 thread)" \
        in other.err and "exact to one machine" in other.err
    block = other.summary["baseline"]
    assert block["same_machine"] is False and not block["measured"] and "SVE256" in block["differs"]
    # exact: the same bits, where the fingerprints match; elsewhere the tier, saying why
    edit(path, lambda d: d.update(tolerance={"all": "exact"}))
    fallen = run_captured(tmp_path / "fallen", *FIT, "--baseline", path)
    assert fallen.code == 0
    edit(path, lambda d: d.update(fingerprint=first.summary["fingerprint"]))
    exact = run_captured(tmp_path / "exact", *FIT, "--baseline", path)
    detail = check(entry(exact.summary, "legendre_fit"), "baseline params.b")["detail"]
    assert exact.code == 1 and "exact: rtol 0, atol 0" in detail


@pytest.mark.slow
def test_an_ensemble_measures_bands_that_a_later_run_is_judged_by(tmp_path):
    path = tmp_path / "measured.yaml"
    run = run_captured(tmp_path / "ens", "--config", CONFIGS / "all.yaml", "--dry-run",
                       "--device", "cpu", "--only", "legendre_fit,my_relu", "--set",
                       "scenarios.legendre_fit.support=[]", "--set", "scenarios.my_relu.support=[]",
                       "--save-baseline", path, "--ensemble", "aten-default,threads2",
                       "--jobs", "2")
    assert run.code == 0, run.out + run.err
    assert "[3/3]" in run.out and "3 runs" in run.out
    assert "entries with bands from 3 runs" in run.out
    data = yaml.safe_load(path.read_text())
    assert list(data["ensemble"]) == ["native", "aten-default", "threads2"]
    assert data["ensemble"]["aten-default"] == "ATEN_CPU_CAPABILITY=default, 1 thread"
    band = data["scenarios"]["my_relu"]["band"]["metrics.final_loss"]
    final_loss = data["scenarios"]["my_relu"]["metrics"]["final_loss"]
    assert band["n"] == 3 and band["min"] <= final_loss <= band["max"]
    assert "Tolerances measured" in path.read_text()
    folder = run.dir
    report = __import__("json").loads((folder / "ensemble.json").read_text())
    assert report["variants"]["aten-default"]["fingerprint"]["capability"] == "DEFAULT"
    assert report["variants"]["threads2"]["fingerprint"]["threads"] == 2
    assert len(report["values"]["my_relu"]["metrics.final_loss"]["runs"]) == 3
    # a later run is judged by the bands
    again = run_captured(tmp_path / "again", "--config", CONFIGS / "all.yaml", "--dry-run",
                         "--device", "cpu", "--only", "legendre_fit,my_relu", "--baseline", path)
    assert again.code == 0 and again.summary["baseline"]["measured"]
    assert "by band" in check(entry(again.summary, "my_relu"), "baseline")["detail"]


@pytest.mark.parametrize("args, words", [
    (("--ensemble",), "--ensemble: only with --save-baseline FILE (it measures the baseline's "
                      "bands)"),
    (("--save-baseline", "{tmp}/b.yaml", "--ensemble", "aten-defualt"),
     "--ensemble: no variant 'aten-defualt' on this CPU (did you mean 'aten-default'?)"),
    (("--save-baseline", "{tmp}/b.yaml", "--ensemble", "--jobs", "0"),
     "--jobs: must be from 1 to 256, got 0"),
])
def test_ensemble_misuse_is_a_one_line_error(tmp_path, args, words):
    code, err = refused(tmp_path / "out", *FIT, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and err == f"error: {words}\n"
    assert not (tmp_path / "out").exists()


def test_an_ensemble_caps_its_jobs_at_the_usable_cores(tmp_path, monkeypatch):
    from demos.lab.comparing import ensemble

    seen = []

    def run_variants(args, chosen, folder, stop, jobs, own):
        seen.append((list(chosen), jobs))
        stop.requested = "SIGINT"  # end before any run
        return {}
    monkeypatch.setattr(ensemble, "available_cores", lambda: 2)
    monkeypatch.setattr(ensemble, "run_variants", run_variants)
    code, out, err = cli(*FIT, "--save-baseline", tmp_path / "b.yaml",
                         "--ensemble", "threads2", "--jobs", "64", "--output-dir", tmp_path / "o")
    assert code == 130 and seen == [(["native", "threads2"], 2)], out + err
    assert "warning: --jobs 64: 2 usable cores here; running 2 runs at a time" in err
    assert "2 at a time" in out and not (tmp_path / "b.yaml").exists()


def test_a_baseline_of_a_scenario_on_its_defaults_names_commands_that_run(tmp_path):
    """Issue 36: saved from `python -m demos.scenarios.my_exp` (a run on the scenario's
    defaults, no config file), its comment said `--config <my_exp defaults>`, which no
    command line can take."""
    import demos
    from demos.lab.comparing.baseline import header

    path = tmp_path / "b.yaml"
    head = header("<my_exp defaults>", str(path), {}, None).split("\n# Saved from")[0]
    assert "<my_exp defaults>" not in head
    assert f"#   python -m demos.scenarios.my_exp --baseline {path}\n" in head
    assert f"#   or from Python: demos.run('my_exp', baseline={str(path)!r})" in head
    demos.run("my_exp", dry_run=True, save_baseline=path, quiet=True, output_dir=tmp_path)
    assert demos.run("my_exp", dry_run=True, baseline=path, quiet=True,
                     output_dir=tmp_path).passed  # the Python spelling runs, and passes
