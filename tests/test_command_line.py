"""The command line: one command, a run (`run` as a first word changes nothing), or a
scenario by name; its options with their help; --device, --seed and --threads as overrides of
the config, validated by its schema; sweep, aggregate and compare are gone (unknown commands)."""
import json
import subprocess
import sys

import pytest

from demos.lab.runner.options import parser
from tests.conftest import QUICK, ROOT, cli


def test_help_lists_every_option_with_help_text_and_imports_no_torch():
    script = ("import contextlib, io, sys\nfrom demos.cli import main\n"
              "out = io.StringIO()\n"
              "with contextlib.redirect_stdout(out):\n"
              "    try: main(['--help'])\n"
              "    except SystemExit as e: assert e.code == 0\n"
              "print(out.getvalue())\n"
              "print('HEAVY', [m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.splitlines()[-1] == "HEAVY []", done.stdout + done.stderr
    assert done.stdout.startswith("usage: runner.py [run] --config PATH")
    for word in ("sweep", "aggregate", "compare RUN", "--seeds", "shard"):
        assert word not in done.stdout
    for action in parser("runner.py")._actions:
        assert action.help, action.option_strings or action.dest


@pytest.mark.parametrize("args, words", [
    (("sweep", "--config", QUICK, "--seeds", "0-1"), "sweep: unknown command"),
    (("aggregate", "outputs"), "aggregate: unknown command"),
    (("compare", "a", "b"), "compare: unknown command"),
    (("--config", QUICK, "--seeds", "0-1"), "unrecognized arguments: --seeds 0-1"),
    (("--config", QUICK, "--jobs", "2"), "--jobs: only with --ensemble"),
    (("--config", QUICK, "--bogus"), "unrecognized arguments: --bogus (see --help)"),
    (("c.yaml",), "c.yaml: unknown command: name a scenario, or a config with --config PATH; "
                  "a config file goes after --config: --config c.yaml"),
    (("legendre_fi",), "legendre_fi: unknown command: name a scenario, or a config with "
                       "--config PATH (did you mean 'legendre_fit'?)"),
    # --device, --seed and --threads: the config's keys, validated by its schema
    (("--config", QUICK, "--seed", "abc"), f"{QUICK}: seed: must be an integer, got 'abc' "
                                           f"(from --seed abc)"),
    (("--config", QUICK, "--seed=-1"), "seed: must be >= 0, got -1 (from --seed -1)"),
    (("--config", QUICK, "--threads", "0"), "threads: must be >= 1, got 0 (from --threads 0)"),
    (("--config", QUICK, "--device", "gpu"), "device: must be auto, cpu, cuda, cuda:N or mps, "
                                             "got 'gpu' (from --device gpu)"),
    (("--config", QUICK, "--seed", "3", "--set", "seed=4"),
     "--seed 3: the same key as --set seed=4 (seed); give it once"),
])
def test_a_bad_command_line_is_a_one_line_error(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: ") and words in err, err
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_run_records_its_command_line_as_typed_and_its_overrides(tmp_path):
    code, out, err = cli("run", "--config", QUICK, "--dry-run", "--no-progress", "--seed", "3",
                         "--device", "cpu", "--output-dir", tmp_path, "--run-name", "r")
    assert code == 0, out + err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "passed" and summary["seed"] == 3
    assert summary["command"][:4] == ["runner.py", "run", "--config", str(QUICK)]
    assert summary["sets"] == ["device=cpu", "seed=3"]


def test_the_word_run_and_abbreviations_change_nothing():
    plain = cli("--config", QUICK, "--dry-run", "--seed", "5", "--print-config")
    assert plain[0] == 0 and "seed: 5" in plain[1]
    assert cli("run", "--config", QUICK, "--dry-run", "--seed", "5", "--print-config") == plain
    assert cli("--conf", QUICK, "--dry", "--see", "5", "--print-config") == plain


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
