"""Baselines given hostile or mistaken paths, and runs of another kind (issue 23): each is one
line and exit 2 before the run, or a save that says what it did; nothing mixed, lost or hung."""
import dataclasses
import os

import pytest
import yaml

from demos.scenarios import registry
from tests.conftest import CONFIGS, check, entry, run_captured
from tests.test_baseline import edit, refused

# two cheap entries of all.yaml (no training): a baseline a run can re-save one of (--only)
TWO = ("--config", CONFIGS / "all.yaml", "--dry-run", "--device", "cpu", "--only")
EXP = ("--config", CONFIGS / "my_exp.yaml", "--dry-run", "--device", "cpu",
       "--set", "scenarios.my_exp.support=[]")


def two_entries(tmp_path, *extra):
    path = tmp_path / "two.yaml"
    run = run_captured(tmp_path / "first", *TWO, "computation_graph,autograd_internals",
                       "--save-baseline", path, *extra)
    assert run.code == 0, run.out + run.err
    return path


def one_line(code, err, *words):
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    for w in words:
        assert w in err, err


# 6: one kind of run per file

def test_a_full_run_is_refused_before_it_starts_into_a_dry_run_baseline(tmp_path):
    path = two_entries(tmp_path)
    before = path.read_text()
    code, err = refused(tmp_path / "full", *TWO[:2], *TWO[3:], "computation_graph",
                        "--save-baseline", path)
    one_line(code, err, f"--save-baseline {path}: holds a --dry-run's values, this is a full "
                        f"run", "name another file")
    assert path.read_text() == before and not (tmp_path / "full").exists()


@pytest.mark.parametrize("change, said", [
    ({"seed": 5}, "seed 5, this run seed 0"),
    ({"torch": "1.0.0"}, "torch 1.0.0, this run torch"),
    ({"device": "cuda:0"}, "device cuda:0, this run device cpu"),
    ({"world_size": 4}, "4 processes (torchrun), this run 1 process"),
])
def test_saving_another_kind_of_run_replaces_every_entry_and_says_so(tmp_path, change, said):
    path = two_entries(tmp_path)
    edit(path, lambda d: d.update(change))
    run = run_captured(tmp_path / "again", *TWO, "computation_graph", "--save-baseline", path)
    assert run.code == 0, run.out + run.err
    assert f"replaced every entry: the file held {said}" in run.out, run.out
    assert "dropped: autograd_internals" in run.out
    data = yaml.safe_load(path.read_text())
    assert list(data["scenarios"]) == ["computation_graph"]  # never mixed
    assert data["seed"] == 0 and data["device"] == "cpu" and data["world_size"] == 1


# 7: values that are not finite

def not_finite(monkeypatch):
    """my_exp reporting a NaN and an infinite metric."""
    reg = registry()
    own = reg["my_exp"].run

    def run(cfg, ctx):
        result = own(cfg, ctx)
        result.metrics.update(nan=float("nan"), inf=float("inf"))
        return result
    monkeypatch.setitem(reg, "my_exp", dataclasses.replace(reg["my_exp"], run=run))


def test_a_baseline_with_values_not_finite_round_trips(tmp_path, monkeypatch):
    not_finite(monkeypatch)
    path = tmp_path / "b.yaml"
    first = run_captured(tmp_path / "save", *EXP, "--save-baseline", path)
    assert first.code == 0, first.out + first.err
    metrics = yaml.safe_load(path.read_text())["scenarios"]["my_exp"]["metrics"]
    assert metrics["nan"] is None and metrics["inf"] is None  # as summary.json writes them
    again = run_captured(tmp_path / "again", *EXP, "--baseline", path)
    assert again.code == 0, again.out + again.err
    assert check(entry(again.summary, "my_exp"), "baseline")["passed"]
    resaved = run_captured(tmp_path / "resave", *EXP, "--save-baseline", path)
    assert resaved.code == 0 and "baseline saved" in resaved.out, resaved.out + resaved.err
    # YAML's own spellings, as a file may hold them, read the same; and can be replaced
    path.write_text(path.read_text().replace("nan: null", "nan: .nan")
                    .replace("inf: null", "inf: -.inf"))
    assert run_captured(tmp_path / "yaml", *EXP, "--baseline", path).code == 0
    assert run_captured(tmp_path / "over", *EXP, "--save-baseline", path).code == 0
    # a finite value where the run has none fails, naming it
    edit(path, lambda d: d["scenarios"]["my_exp"]["metrics"].update(nan=1.0))
    moved = run_captured(tmp_path / "moved", *EXP, "--baseline", path)
    assert moved.code == 1 and "FAIL baseline metrics.nan: old 1, new nan" in moved.out, moved.out


# 9 and the directory: what cannot be a baseline file

@pytest.fixture
def hostile(tmp_path):
    """A FIFO, a link to /dev/zero, a folder and a 2 MiB file, by name."""
    paths = {"fifo": tmp_path / "fifo.yaml", "zero": tmp_path / "zero.yaml",
             "dir": tmp_path / "dir.yaml", "huge": tmp_path / "huge.yaml"}
    os.mkfifo(paths["fifo"])
    os.symlink("/dev/zero", paths["zero"])
    paths["dir"].mkdir()
    with open(paths["huge"], "wb") as f:
        f.truncate(2 << 20)
    return paths


@pytest.mark.parametrize("kind, said", [
    ("fifo", "not a regular file (a FIFO, a device or a socket)"),
    ("zero", "not a regular file (a FIFO, a device or a socket)"),
    ("dir", "is a directory"), ("huge", "larger than 1024 KiB")])
def test_baseline_that_is_no_file_is_one_line(tmp_path, hostile, kind, said):
    path = hostile[kind]
    code, err = refused(tmp_path / "out", *EXP, "--baseline", path)
    one_line(code, err, f"--baseline {path}: {said}; a baseline file is expected")
    code, err = refused(tmp_path / "out", *EXP, "--save-baseline", path)
    one_line(code, err, f"--save-baseline {path}: {said}")
    assert "not a config file" not in err and not (tmp_path / "out").exists()


# 17: the output folder's own files; links

def test_saving_into_the_output_folders_own_files_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / "2026-01-01_00-00-00").mkdir(parents=True)
    for target, said in ((out / "index.html", "the output folder's index.html"),
                         (out / ".index.lock", "the output folder's .index.lock"),
                         (out / "2026-01-01_00-00-00" / "b.yaml",
                          f"inside {out / '2026-01-01_00-00-00'}, a run folder of the output "
                          f"folder")):
        code, err = refused(out, *EXP, "--save-baseline", target)
        one_line(code, err, f"--save-baseline {target}: ", said)
        assert not target.exists()
    link = tmp_path / "link.yaml"
    link.symlink_to(out / "index.html")  # through a link: the same file
    code, err = refused(out, *EXP, "--save-baseline", link)
    one_line(code, err, "the output folder's index.html")
    assert sorted(p.name for p in out.iterdir()) == ["2026-01-01_00-00-00"]  # nothing ran


def test_saving_through_a_link_writes_the_file_it_points_to(tmp_path):
    real = tmp_path / "kept" / "real.yaml"
    real.parent.mkdir()
    link = tmp_path / "link.yaml"
    link.symlink_to(real)  # not there yet: created
    run = run_captured(tmp_path / "a", *EXP, "--save-baseline", link)
    assert run.code == 0 and f"baseline saved: {link} (-> {real})" in run.out, run.out
    assert link.is_symlink() and "my_exp" in yaml.safe_load(real.read_text())["scenarios"]
    run = run_captured(tmp_path / "b", *EXP, "--save-baseline", link)  # and replaced
    assert run.code == 0 and link.is_symlink(), run.out + run.err
    assert run_captured(tmp_path / "c", *EXP, "--baseline", link).code == 0


# 20: the world size

def test_a_baseline_records_its_world_size_and_a_run_of_another_says_so(tmp_path):
    path = tmp_path / "b.yaml"
    assert run_captured(tmp_path / "save", *EXP, "--save-baseline", path).code == 0
    assert yaml.safe_load(path.read_text())["world_size"] == 1
    edit(path, lambda d: d.update(world_size=2))
    run = run_captured(tmp_path / "run", *EXP, "--baseline", path)
    assert run.code == 0, run.out + run.err
    assert ("baseline: the baseline ran as 2 processes (torchrun), this run as 1 process: values "
            "may move") in run.err, run.err


def test_saving_again_over_a_baseline_of_a_config_made_in_memory(tmp_path):
    """A scenario run on its defaults (no config file: `<my_exp defaults>`) saves a baseline,
    and saving it again over the same file is no crash: there is no config file it could be."""
    import demos

    path = tmp_path / "b.yaml"
    for _ in range(2):
        r = demos.run({"scenarios": [{"scenario": "my_exp", "support": []}]}, dry_run=True,
                      save_baseline=path, output_dir=tmp_path / "out", quiet=True)
        assert r.passed and "my_exp" in yaml.safe_load(path.read_text())["scenarios"]
