"""The commands run, sweep, aggregate and compare: each with its own options, run the default;
the old spellings of 0.1.0 (--seeds on a run, --aggregate DIR, --compare A B) are gone, each a
one-line error that names the command."""
import json
import shutil
import subprocess
import sys

import pytest

from demos.lab.runner.options import COMMANDS, parsers
from tests.conftest import ROOT, SWEEP, cli, run_cli


@pytest.fixture
def swept(sweep_of_three):
    """`sweep` of three seeds: its folder, with the points' run folders in it (conftest's)."""
    code, text, folder = sweep_of_three
    assert code == 0, text
    return folder


def test_help_lists_the_commands():
    done = run_cli("--help", timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: runner.py [run] --config PATH")
    for name in COMMANDS:
        assert f"runner.py {name} " in done.stdout  # in the synopsis
        assert f"    {name} " in done.stdout or f"    {name}\n" in done.stdout  # listed
    assert "old spelling" not in done.stdout and "--aggregate" not in done.stdout


def test_each_commands_help_lists_its_options_with_help_text_and_imports_no_torch():
    script = ("import contextlib, io, sys\nfrom demos.cli import main\n"
              "for name in ('run', 'sweep', 'aggregate', 'compare'):\n"
              "    out = io.StringIO()\n"
              "    with contextlib.redirect_stdout(out):\n"
              "        try: main([name, '--help'])\n"
              "        except SystemExit as e: assert e.code == 0, name\n"
              "    print(out.getvalue())\n"
              "print('HEAVY', [m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.splitlines()[-1] == "HEAVY []", done.stdout + done.stderr
    for name in ("run", "sweep", "aggregate", "compare"):
        assert f"usage: runner.py {name} " in done.stdout
    _, commands = parsers("runner.py")
    for name, p in commands.items():
        for action in p._actions:
            assert action.help, (name, action.option_strings or action.dest)


@pytest.mark.parametrize("args, words", [
    (("compare", "a", "b", "--save-baseline", "b.yaml"),
     "--save-baseline: an option of run, not of compare (see runner.py compare --help)"),
    (("compare", "a", "b", "--no-progress"),
     "--no-progress: an option of run and sweep, not of compare"),
    (("aggregate", "d", "--seeds", "0-1"), "--seeds: an option of sweep, not of aggregate"),
    (("aggregate", "d", "--output-dir", "o"),
     "--output-dir: an option of run, sweep and compare, not of aggregate"),
    (("sweep", "--config", SWEEP, "--seeds", "0", "--open"),
     "--open: an option of run, not of sweep (see runner.py sweep --help)"),
    (("sweep", "--config", SWEEP, "--seeds", "0", "--ens"),  # abbreviated, as argparse reads
     "--ensemble: an option of run, not of sweep"),
    (("run", "--config", SWEEP, "--seeds", "0-1"), "--seeds: an option of sweep, not of run"),
    # the old spellings of the commands: refused, naming the command (a run is the default)
    (("--config", SWEEP, "--seeds", "0"),
     "--seeds: an option of sweep, not of run (see runner.py run --help)"),
    (("--compare", "a", "b"), "--compare: an option of 0.1.0, now a command: runner.py compare "
                              "RUN_A RUN_B ..."),
    (("--aggregate=d",), "--aggregate: an option of 0.1.0, now a command: runner.py aggregate DIR"),
    (("run", "--config", SWEEP, "--jobs", "2"), "--jobs: only for a sweep or an --ensemble"),
    # and what is no option anywhere, or no command
    (("compare", "a", "b", "--bogus"), "unrecognized arguments: --bogus (see --help)"),
    (("compar", "a", "b"), "compar: not a command or a scenario (did you mean 'compare'?)"),
    (("c.yaml",), "c.yaml: not a command or a scenario; a config file goes after --config: "
                  "--config c.yaml"),
    (("legendre_fi",), "legendre_fi: not a command or a scenario (did you mean "
                       "'legendre_fit'?)"),
    (("sweep", "--config", SWEEP), "sweep: what to sweep? --seeds LIST, --sweep KEY=V1,V2,..."),
])
def test_an_option_of_another_command_is_a_one_line_error(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: ") and words in err, err
    assert not any(tmp_path.iterdir())  # nothing written


def test_run_in_process_and_its_command_line_recorded_as_typed(tmp_path):
    code, out, err = cli("run", "--config", SWEEP, "--dry-run", "--no-progress",
                         "--output-dir", tmp_path, "--run-name", "r")
    assert code == 0, out + err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "passed"
    assert summary["command"][:4] == ["runner.py", "run", "--config", str(SWEEP)]


def test_print_config_is_the_same_either_way():
    assert cli("run", "--config", SWEEP, "--dry-run", "--print-config") == \
        cli("--config", SWEEP, "--dry-run", "--print-config")


@pytest.mark.slow
def test_sweep_in_process_launches_its_points_as_runs(swept):
    data = json.loads((swept / "sweep.json").read_text())
    assert data["command"][:2] == ["runner.py", "sweep"]
    assert [p["seed"] for p in data["points"]] == [0, 1, 2]
    for p in data["points"]:  # each point's own command line names no command: a run
        point = json.loads((swept / p["run"] / "summary.json").read_text())
        assert point["status"] == "passed" and point["command"][1] == "--config"


def test_aggregate_writes_sweep_json_again(swept, tmp_path):
    copy = tmp_path / "again"
    shutil.copytree(swept, copy)
    (copy / "sweep.json").unlink()
    code, out, _ = cli("aggregate", copy)
    assert code == 0 and f"sweep: {copy / 'sweep.html'}" in out
    again = json.loads((copy / "sweep.json").read_text())
    before = json.loads((swept / "sweep.json").read_text())
    assert again["command"][1:2] == ["aggregate"]
    assert again["groups"] == before["groups"] and again["points"] == before["points"]


def test_compare_prints_what_differs(swept, tmp_path):
    runs = sorted(p for p in swept.iterdir() if p.is_dir())
    code, out, _ = cli("compare", *runs, "--output-dir", tmp_path)
    assert code == 1  # three seeds: their losses differ
    assert "3 runs compared with 0_seed=0" in out
    assert len(list(tmp_path.glob("compare_*/compare.html"))) == 1


def test_an_abbreviation_means_the_same_in_every_command(tmp_path):
    # --see is --seed or --seeds: refused, as one parser over every option refused it, not
    # read as run's --seed because run has no --seeds
    code, _, err = cli("--config", SWEEP, "--see", "3", "--print-config")
    assert code == 2
    assert err == "error: ambiguous option: --see could match --seed, --seeds (see --help)\n"
    # a prefix that is unique among all options is that option, in any command
    assert cli("--conf", SWEEP, "--dry", "--print-config") == \
        cli("run", "--config", SWEEP, "--dry-run", "--print-config")


def test_a_scenario_by_name_runs_its_shipped_config(monkeypatch):
    monkeypatch.chdir(ROOT)
    by_name = cli("legendre_fit", "--dry-run", "--print-config")
    assert by_name[0] == 0 and by_name == cli("--config", "configs/legendre_fit.yaml",
                                              "--dry-run", "--print-config")


@pytest.mark.parametrize("config, words", [
    ("configs/legendre.yaml", "configs/legendre.yaml: no such file (did you mean "
                              "'configs/legendre_fit.yaml'?)"),
    ("legendre_fit", "legendre_fit: no such file (did you mean 'configs/legendre_fit.yaml'?)"),
    ("configs/nothing_like_it.yaml", "configs/nothing_like_it.yaml: no such file\n")])
def test_a_missing_config_gets_a_did_you_mean_from_the_configs(monkeypatch, config, words):
    monkeypatch.chdir(ROOT)
    code, _, err = cli("--config", config)
    assert code == 2 and words in err, err
