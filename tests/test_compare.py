"""--compare: run folders against the first, within tolerance; the table, compare.json and
compare.html. The runs are copies of the session's dry run, edited."""
import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from demos.cli import main
from tests.conftest import ROOT, entry, summary

PNG = b"\x89PNG\r\n\x1a\n"
KEY = "metrics.final_loss"  # of legendre_fit, a training entry (it has a metrics.csv)


def copy_run(dry_run, dest):
    """The dry run's summary, config and report, and two entries' metrics.csv (two plots)."""
    def ignore(folder, names):
        keep = ("summary.json", "config.yaml", "report.html")
        if folder.endswith(("legendre_fit", "lenet")):
            keep = ("metrics.csv",)
        return [n for n in names if n not in keep and not (Path(folder) / n).is_dir()]

    shutil.copytree(dry_run.dir, dest, ignore=ignore)
    return dest


def edit_summary(run, change):
    data = summary(run)
    change(data)
    (run / "summary.json").write_text(json.dumps(data))


def move(run, factor, entry_id="legendre_fit", name="final_loss"):
    """Multiply one metric of the run's summary by `factor`."""
    edit_summary(run, lambda s: entry(s, entry_id)["metrics"].update(
        {name: entry(s, entry_id)["metrics"][name] * factor}))


def set_tolerance(run, table, entry_id="legendre_fit"):
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    next(e for e in cfg["scenarios"] if e["id"] == entry_id)["tolerance"] = table
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def compare(out, *runs):
    """--compare in-process: (exit code, stdout, stderr)."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(["compare", *map(str, runs), "--output-dir", str(out)])
    return code, o.getvalue(), e.getvalue()


@pytest.fixture
def runs(dry_run, tmp_path):
    """Two identical copies of the dry run: run_a (the reference) and run_b."""
    return copy_run(dry_run, tmp_path / "run_a"), copy_run(dry_run, tmp_path / "run_b")


def test_identical_runs_agree(runs, tmp_path):
    code, out, _ = compare(tmp_path / "out", *runs)
    assert code == 0
    agree, path = out.splitlines()
    assert agree == "2 runs agree within tolerance (reference run_a)"
    folder = only_compare_folder(tmp_path / "out")
    assert path == str(folder / "compare.html")
    data = json.loads((folder / "compare.json").read_text())
    assert data["agree"] and data["differences"] == [] and data["only_in"] == {}
    assert [r["label"] for r in data["runs"]] == ["run_a", "run_b"]
    assert "run_b: identical" in (folder / "compare.html").read_text()


def test_a_moved_metric_is_listed_highlighted_and_plotted(runs, tmp_path):
    a, b = runs
    old = entry(summary(a), "legendre_fit")["metrics"]["final_loss"]
    move(b, 1 + 1e-3)
    edit_summary(b, lambda s: s.update(status="failed", sets=["scenarios.legendre_fit.lr=1e-5"]))
    (b / "config.yaml").write_text((b / "config.yaml").read_text().replace("lr: 5.0e-06",
                                                                           "lr: 1.0e-05"))
    code, out, _ = compare(tmp_path / "out", a, b)
    assert code == 1
    row = next(line for line in out.splitlines() if KEY in line).split()
    assert row[:5] == ["run_b", "legendre_fit", KEY, f"{old:.10g}", f"{old * 1.001:.10g}"]
    folder = only_compare_folder(tmp_path / "out")
    assert out.splitlines()[-1] == str(folder / "compare.html")
    data = json.loads((folder / "compare.json").read_text())
    assert [(d["run"], d["entry"], d["key"], d["old"], d["new"]) for d in data["differences"]] \
        == [("run_b", "legendre_fit", KEY, old, old * 1.001)]
    page = (folder / "compare.html").read_text()
    assert '<span class="del">-  lr: 5.0e-06' in page and '<span class="add">+  lr: 1.0e-05' in page
    assert page.count('class="fail"') == 1 and "badge failed" in page
    assert "scenarios.legendre_fit.lr=1e-5" in page.replace("<wbr>", "")  # wraps at _ and =
    assert "../../run_a/report.html" in page
    pngs = sorted(folder.glob("*.png"))
    assert {p.name for p in pngs} >= {"legendre_fit_loss.png", "lenet_loss.png"}
    for png in pngs:
        assert f'<img src="{png.name}"' in page and png.read_bytes().startswith(PNG)


def test_a_value_moved_within_tolerance_agrees(runs, tmp_path):
    move(runs[1], 1 + 1e-8)
    assert compare(tmp_path / "out", *runs)[0] == 0


@pytest.mark.parametrize("where, code", [(0, 0), (1, 1)])  # only the reference's config counts
def test_a_tolerance_in_the_first_runs_config_loosens_its_key(runs, tmp_path, where, code):
    move(runs[1], 1 + 1e-3)
    set_tolerance(runs[where], {KEY: {"rtol": 1e-2}})
    assert compare(tmp_path / "out", *runs)[0] == code


def test_an_entry_in_only_one_run_is_named(runs, tmp_path):
    edit_summary(runs[1], lambda s: s.update(
        scenarios=[e for e in s["scenarios"] if e["id"] != "lenet"]))
    code, out, _ = compare(tmp_path / "out", *runs)
    assert code == 1 and "lenet: only in run_a" in out.splitlines()


@pytest.mark.parametrize("case", ["one run", "missing", "a file", "no summary", "twice",
                                  "bad tolerance"])
def test_bad_input_is_a_one_line_error_and_writes_nothing(runs, tmp_path, case):
    a, b = runs
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    if case == "bad tolerance":
        set_tolerance(a, {KEY: {"rtol": "loose"}})
    args, named = {"one run": ([a], "compare: needs two"),
                   "missing": ([a, tmp_path / "nope"], "nope"),
                   "a file": ([a, tmp_path / "file"], "file"),
                   "no summary": ([a, tmp_path / "empty"], "empty"),
                   "twice": ([a, b, a / ".." / "run_a"], "run_a"),
                   "bad tolerance": ([a, b], "run_a/config.yaml")}[case]
    code, out, err = compare(tmp_path / "out", *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err
    assert not (tmp_path / "out").exists()


def test_compare_does_not_import_torch(runs, tmp_path):
    script = ("import sys; from demos.cli import main; "
              f"main(['compare', {str(runs[0])!r}, {str(runs[1])!r}, '--output-dir', "
              f"{str(tmp_path / 'out')!r}]); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "False", done.stderr


def only_compare_folder(out):
    (folder,) = out.glob("compare_*")
    return folder


def test_runs_of_other_machines_are_named_and_compared_at_the_arithmetic_tier(runs, tmp_path):
    a, b = runs
    move(b, 1 + 3e-6)  # beyond the same machine's 1e-6, within the arithmetic tier's 1e-5
    assert compare(tmp_path / "same", a, b)[0] == 1
    edit_summary(b, lambda s: s["fingerprint"].update(capability="SVE256", threads=2))
    code, out, _ = compare(tmp_path / "other", a, b)
    assert code == 0, out
    assert f"not the same machine: run_a: {summary(a)['fingerprint']['capability']}, 1 thread; " \
           f"run_b: SVE256, 2 threads" in out
    move(b, 1 + 1e-4)
    code, out, _ = compare(tmp_path / "far", a, b)
    row = next(line for line in out.splitlines() if KEY in line)
    assert code == 1 and row.endswith("arithmetic")


def test_a_baselines_bands_judge_the_runs_with_compare(runs, tmp_path):
    a, b = runs
    move(b, 1.3)
    assert compare(tmp_path / "plain", a, b)[0] == 1
    base = tmp_path / "band.yaml"
    base.write_text(yaml.safe_dump({"dry_run": True, "scenarios": {"legendre_fit": {
        "metrics": {"final_loss": 1.0}, "band": {KEY: {"n": 3, "min": 1.0, "max": 1.1,
                                                      "ratio": 1.5}}}}}))
    o = io.StringIO()
    with contextlib.redirect_stdout(o):
        code = main(["compare", str(a), str(b), "--baseline", str(base),
                     "--output-dir", str(tmp_path / "band")])
    assert code == 0, o.getvalue()


def test_loss_curves_are_labelled_by_what_differs_not_by_timestamps(tmp_path):
    """compare.html's loss curves: each run named by the --set values and seed that set it
    apart (`lr=5e-6`, `lr=1e-5`), the folder's name only where nothing does."""
    from demos.lab.comparing.side_by_side import RunFolder, what_differs

    def run(label, sets, seed=0):
        return RunFolder(tmp_path / label, label, {"sets": sets, "seed": seed}, "")

    both = ["scenarios.legendre_fit.support=[]"]
    runs = [run("2026-11-25_13-55-41", ["scenarios.legendre_fit.lr=5e-6", *both]),
            run("2026-11-25_13-55-45", ["scenarios.legendre_fit.lr=1e-5", *both]),
            run("seeded", ["scenarios.legendre_fit.lr=5e-6", *both], seed=3)]
    assert what_differs(runs) == {"2026-11-25_13-55-41": "lr=5e-6, seed=0",
                                  "2026-11-25_13-55-45": "lr=1e-5, seed=0",
                                  "seeded": "lr=5e-6, seed=3"}
    assert what_differs(runs[:2]) == {"2026-11-25_13-55-41": "lr=5e-6",
                                      "2026-11-25_13-55-45": "lr=1e-5"}
    same = [run("a", both), run("b", both)]  # nothing sets them apart: their names
    assert what_differs(same) == {"a": "a", "b": "b"}
    keys = [run("x", ["scenarios.x.lr=1"]), run("y", ["scenarios.y.lr=1"])]  # whole keys
    assert what_differs(keys) == {"x": "scenarios.x.lr=1", "y": "scenarios.y.lr=1"}
