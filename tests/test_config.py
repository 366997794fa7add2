"""Config loading and validation: the exact one-line errors, --set, --only, --dry-run, dump."""
import subprocess
import sys
import textwrap

import pytest
import yaml

from demos.cli import main
from demos.lab.core import config
from demos.lab.core.schema import show
from demos.scenarios import registry
from tests.conftest import CONFIGS, NO_SUPPORT, ROOT

REGISTRY = registry()


def write(tmp_path, text, name="x.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(capsys, *argv):
    """Run the CLI in-process; assert exit code 2 and a single 'error: ...' line; return it."""
    assert main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("body, message", [
    ("scenarios:\n- scenario: legendre_fit\n  lr: -1.0\n",
     "scenarios[0].lr: must be > 0, got -1.0"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: 0\n",
     "scenarios[0].steps: must be >= 1, got 0"),
    ("scenarios:\n- scenario: legendre_fit\n  lrr: 1.0\n",
     "scenarios[0].lrr: unknown key (did you mean 'lr'?)"),
    ("sed: 1\nscenarios:\n- scenario: legendre_fit\n",
     "sed: unknown key (did you mean 'seed'?)"),
    ("scenarios:\n- scenario: legendre_fitt\n",
     "scenarios[0].scenario: unknown scenario 'legendre_fitt' (did you mean 'legendre_fit'?)"),
    ("scenarios:\n- scenario: my_relu\n  steps: many\n",
     "scenarios[0].steps: must be an integer, got 'many'"),
    ("scenarios:\n- scenario: my_relu\n  steps: 2.5\n",
     "scenarios[0].steps: must be an integer, got 2.5"),
    ("scenarios:\n- scenario: my_relu\n  lr: true\n",
     "scenarios[0].lr: must be a number, got True"),
    ("scenarios:\n- scenario: my_relu\n  lr: .nan\n",
     "scenarios[0].lr: must be a finite number, got nan"),
    ("scenarios:\n- scenario: lenet\n  optimizer: adma\n",
     "scenarios[0].optimizer: must be one of adam, sgd, got 'adma' (did you mean 'adam'?)"),
    ("scenarios:\n- scenario: my_relu\n- scenario: my_relu\n",
     "scenarios[1].id: duplicate id 'my_relu' (also scenarios[0]); give each entry its own id"),
    ("scenarios:\n- scenario: legendre_fit\n  expect: {params: {e: {value: 1}}}\n",
     "scenarios[0].expect.params.e: legendre_fit has no param 'e' (expected one of: a, b, c, d)"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: {accuracy: {min: 0.9}}}\n",
     "scenarios[0].expect.metrics.accuracy: lenet has no metric 'accuracy' "
     "(did you mean 'test_accuracy'?)"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: {test_accuracy: {rtol: 0.1}}}\n",
     "scenarios[0].expect.metrics.test_accuracy: needs at least one of value, min, max"),
    ("device: gpu\nscenarios:\n- scenario: lenet\n",
     "device: must be auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    ("seed: 0\n", "scenarios: missing (required): a list of scenario entries, "
                  "e.g. [{scenario: legendre_fit}]"),
    ("scenarios: legendre_fit\n",
     "scenarios: must be a list, got 'legendre_fit'"),
    ("scenarios: []\n", "scenarios: must be a non-empty list of scenario entries, got []"),
    ("- scenario: lenet\n",
     "top level: must be a mapping with a 'scenarios' list, got [{'scenario': 'lenet'}]"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: [1\n",
     "invalid YAML: line 4, column 1: expected ',' or ']', but got '<stream end>'"),
    ("scenarios:\n- scenario: legendre_fit\n  id: ../up\n",
     "scenarios[0].id: must be a folder-safe name (letters, digits, _ . -; at most 100), "
     "got '../up'"),
    ("scenarios:\n- scenario: legendre_fit\n  id: \"fit\\n\"\n",
     "scenarios[0].id: must be a folder-safe name (letters, digits, _ . -; at most 100), "
     "got 'fit\\n'"),
    ("scenarios:\n- scenario: legendre_fit\n  id: " + "x" * 101 + "\n",
     "scenarios[0].id: must be a folder-safe name (letters, digits, _ . -; at most 100), "
     "got " + show("x" * 101)),
    ("scenarios:\n- scenario: legendre_fit\n  lr: 1.0e-6\n  lr: 1.0e-5\n",
     "line 4: duplicate key 'lr'; YAML would keep only the last"),
    ("seed: 1\nscenarios:\n- scenario: legendre_fit\nseed: 2\n",
     "line 4: duplicate key 'seed'; YAML would keep only the last"),
    ("scenarios:\n- scenario: legendre_fit\n  points: 10000000\n",
     "scenarios[0].points: must be <= 1000000, got 10000000"),
    ("scenarios:\n- scenario: my_relu\n  N: 100000\n  D_in: 10000\n",
     "scenarios[0]: a training step would hold 1,045,002,000 numbers (x, y, the weights, the "
     "hidden layer and their gradients), more than 100,000,000 (400 MB in float32); make N, "
     "D_in, H or D_out smaller"),
    ("scenarios:\n- scenario: legendre_fit\n  id: summary.json\n",
     "scenarios[0].id: 'summary.json' is a file of the run folder itself; choose another id"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: {test_accuracy: {min: 0.9, max: 0.5}}}\n",
     "scenarios[0].expect.metrics.test_accuracy: min 0.9 is above max 0.5"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: {test_accuracy: {min: 0.9, atol: 1}}}\n",
     "scenarios[0].expect.metrics.test_accuracy: rtol/atol/ratio need a value to compare with"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: 3}\n",
     "scenarios[0].expect.metrics: must be a mapping, got 3"),
    ("scenarios:\n- scenario: lenet\n  expect: {metrics: {1: {min: 0}}}\n",
     "scenarios[0].expect.metrics: keys must be names, got 1"),
    ("threads: many\nscenarios:\n- scenario: lenet\n",
     "threads: must be int or auto, got 'many'"),
    ("threads: 0\nscenarios:\n- scenario: lenet\n", "threads: must be >= 1, got 0"),
    ("seed: 10000000000000\nscenarios:\n- scenario: lenet\n",
     "seed: must be at most 1e+12 in size, got 10000000000000"),
    ("scenarios:\n- scenario: my_relu\n  lr: 10000000000000\n",
     "scenarios[0].lr: must be a finite number of reasonable size, got 10000000000000"),
    ("scenarios:\n- scenario: custom_function\n  inputs: [{shape: [2]}]\n",
     "scenarios[0].function: missing (required): the Function as module:Class, e.g. my_ops:MyCube"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, "
     "inputs: [{shape: [2], low: 2, high: 1}]}\n",
     "scenarios[0].inputs[0]: low 2.0 must be below high 1.0"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, inputs: [{value: 1, low: 0}]}\n",
     "scenarios[0].inputs[0]: low/high go with shape, not with value"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, inputs: [{value: []}]}\n",
     "scenarios[0].inputs[0].value: empty list"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, inputs: [{value: [1, x]}]}\n",
     "scenarios[0].inputs[0].value[1]: must be a finite number, got 'x'"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, reference: ab, "
     "inputs: [{value: 1}]}\n",
     "scenarios[0].reference: expected module:attribute (e.g. my_ops:MyCube), got 'ab'"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, inputs: [{value: 1}], "
     "support: [vmap, backward, vmap]}\n",
     "scenarios[0].support[2]: vmap is given twice (also at [0]); give it once"),
    ("scenarios:\n- {scenario: custom_function, function: a:B, inputs: [{value: 1}], "
     "support: [vmap], require: [vmap, vmap]}\n",
     "scenarios[0].require[1]: vmap is given twice (also at [0]); give it once"),
])
def test_config_errors_are_one_exact_line(tmp_path, capsys, body, message):
    path = write(tmp_path, body)
    assert error_of(capsys, "--config", path) == f"error: {path}: {message}"


def test_missing_file_and_directory(tmp_path, capsys):
    assert error_of(capsys, "--config", tmp_path / "nope.yaml") == \
        f"error: {tmp_path / 'nope.yaml'}: no such file"
    assert error_of(capsys, "--config", tmp_path) == \
        f"error: {tmp_path}: is a directory, not a config file"


def test_exponent_without_dot_is_a_number():
    """PyYAML reads 5e-6 as a string; the config reads it as the number it is."""
    raw = yaml.safe_load("scenarios:\n- scenario: legendre_fit\n  lr: 5e-6\n")
    assert raw["scenarios"][0]["lr"] == "5e-6"
    assert config.build_run(raw, REGISTRY).scenarios[0].lr == 5e-6


def test_defaults_reproduce_the_documents():
    names = [n for n in REGISTRY if n != "custom_function"]  # that one needs a Function
    run = config.build_run({"scenarios": [{"scenario": n} for n in names]}, REGISTRY)
    by_id = {e.id: e for e in run.scenarios}
    legendre, relu, lenet = by_id["legendre_fit"], by_id["my_relu"], by_id["lenet"]
    graph, internals = by_id["computation_graph"], by_id["autograd_internals"]
    my_exp = by_id["my_exp"]
    assert (legendre.points, legendre.steps, legendre.lr) == (2000, 2000, 5e-6)
    assert legendre.init == [0.0, -1.0, 0.0, 0.3]
    assert (relu.N, relu.D_in, relu.H, relu.D_out, relu.steps, relu.lr) == \
        (64, 1000, 100, 10, 500, 1e-6)
    assert (lenet.optimizer, lenet.lr, lenet.dataset) == ("adam", 2e-3, "digits")
    assert (graph.x, graph.w, graph.b) == (1.0, 4.0, 0.5)
    assert (internals.a, internals.b, internals.d) == (2.0, 3.0, 4.0)
    assert my_exp.inputs == [1.0, 2.0, 3.0]
    assert [e.id for e in run.scenarios] == names


def test_set_overrides_by_id_and_creates_nested_keys():
    run = config.load(str(CONFIGS / "all.yaml"), REGISTRY,
                      ["seed=3", "scenarios.legendre_fit.lr=1e-5",
                       "scenarios.legendre_fit.expect.params.b.value=-2.0",
                       "scenarios.lenet.expect.metrics.final_loss={max: 1}"])
    legendre = run.scenarios[0]
    assert run.seed == 3 and legendre.lr == 1e-5
    assert legendre.expect.params["b"].value == -2.0
    assert legendre.expect.params["b"].rtol == 1e-5  # the rest of the target kept
    assert run.scenarios[3].expect.metrics["final_loss"].max == 1


@pytest.mark.parametrize("assignment, message", [
    ("scenarios.legendre.lr=1",
     "error: --set scenarios.legendre.lr=1: no scenario entry with id 'legendre' "
     "(did you mean 'legendre_fit'?)"),
    ("scenarios.legendre_fit.lr=-1",
     "error: {all}: scenarios[0].lr: must be > 0, got -1.0 "
     "(from --set scenarios.legendre_fit.lr=-1)"),
    ("scenarios.legendre_fit.lr",
     "error: --set scenarios.legendre_fit.lr: expected KEY=VALUE, e.g. seed=3 or "
     "scenarios.<id>.lr=1e-5"),
    ("scenarios.legendre_fit.lr.x=1",
     "error: --set scenarios.legendre_fit.lr.x=1: scenarios[0].lr is not a mapping"),
    ("seed=[1", "error: --set seed=[1: invalid YAML: line 1, column 3: "
                "expected ',' or ']', but got '<stream end>'"),
    ("sede=1", "error: {all}: sede: unknown key (did you mean 'seed'?) (from --set sede=1)"),
    ("scenarios.legendre_fit.expect.metrics.final_loss.value.x=1",  # the path, not doubled
     "error: --set scenarios.legendre_fit.expect.metrics.final_loss.value.x=1: "
     "scenarios[0].expect.metrics.final_loss.value is not a mapping"),
    ("scenarios[-1].lr=1", "error: --set scenarios[-1].lr=1: scenarios[-1]: an entry's number "
                           "is 0, 1, 2, ... (or use scenarios.<id>.<key>=VALUE)"),
    ("seed=" + "[" * 70 + "]" * 70,
     "error: --set seed=" + "[" * 70 + "]" * 70 + ": line 1: nested more than 64 levels deep; "
     "refusing it"),
])
def test_set_errors(capsys, assignment, message):
    all_yaml = CONFIGS / "all.yaml"
    assert error_of(capsys, "--config", all_yaml, "--set", assignment) == \
        message.format(all=all_yaml)


def test_command_line_errors(capsys):
    all_yaml = CONFIGS / "all.yaml"
    assert error_of(capsys) == \
        "error: --config PATH is required (or --list); e.g. --config configs/all.yaml"
    assert error_of(capsys, "--config", all_yaml, "--device", "gpu") == \
        f"error: {all_yaml}: device: must be auto, cpu, cuda, cuda:N or mps, got 'gpu' " \
        f"(from --device gpu)"
    assert error_of(capsys, "--config", all_yaml, "--seed=-1") == \
        f"error: {all_yaml}: seed: must be >= 0, got -1 (from --seed -1)"
    assert error_of(capsys, "--config", all_yaml, "--bogus") == \
        "error: unrecognized arguments: --bogus (see --help)"
    assert error_of(capsys, "--config", all_yaml, "--only", "lenet,relu") == \
        f"error: --only lenet,relu: {all_yaml} has no scenario entry with id 'relu' " \
        f"(did you mean 'my_relu'?)"


def test_cuda_asked_for_but_absent_is_a_usage_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert error_of(capsys, "--config", CONFIGS / "lenet.yaml", "--device", "cuda").startswith(
        "error: --device cuda: CUDA is not available on this machine")


def test_print_config_shows_the_resolved_config_which_loads_again(tmp_path, capsys):
    assert main(["--config", str(CONFIGS / "all.yaml"), *NO_SUPPORT, "--only", "lenet,my_relu",
                 "--dry-run",
                 "--set", "seed=7", "--print-config"]) == 0
    text = capsys.readouterr().out
    data = yaml.safe_load(text)
    assert data["seed"] == 7 and [e["id"] for e in data["scenarios"]] == ["my_relu", "lenet"]
    assert data["scenarios"][0]["steps"] == 5 and data["scenarios"][1]["epochs"] == 1
    again = config.load(str(write(tmp_path, text)), REGISTRY)
    assert config.dump(again) == text


def test_all_yaml_matches_the_per_scenario_configs():
    """configs/all.yaml runs each scenario as its own config file does, but for the support
    matrix's rows: all.yaml asks for the torch.func rows too, which one scenario alone leaves
    out (they load torch's compiler stack; lenet's Adam loads it in all.yaml anyway)."""
    import dataclasses

    everything = config.load(str(CONFIGS / "all.yaml"), REGISTRY)
    assert sorted(e.scenario for e in everything.scenarios) == sorted(
        n for n, s in REGISTRY.items() if not s.data_parallel)  # lenet_ddp: under torchrun
    for e in everything.scenarios:
        [alone] = config.load(str(CONFIGS / f"{e.scenario}.yaml"), REGISTRY).scenarios
        if hasattr(e, "support"):
            assert set(alone.support) < set(e.support) or alone.support == e.support, e.id
            assert e.scenario == "custom_function" or "compile" not in e.support, e.id
            alone = dataclasses.replace(alone, support=e.support)
        assert alone == e, e.scenario


def test_list_help_and_config_errors_do_not_import_torch(tmp_path):
    """--help and --list never import torch. A config error imports only the scenario files
    the config names: those whose file opens with its tutorial's code (legendre_fit, which
    imports torch at its top, as every document's scenario does) load torch; custom_function,
    which does not, still answers without it."""
    bad = write(tmp_path, "scenarios:\n- scenario: custom_function\n  function: nope\n")
    for argv in (["--help"], ["--list"], ["--config", str(bad)],
                 ["--config", str(CONFIGS / "custom_function.yaml"), "--print-config"],
                 ["--config", str(CONFIGS / "custom_function.yaml"), "--set", "seed=-1"]):
        code = ("import sys; from demos.cli import main\n"
                "try: main(%r)\nexcept SystemExit: pass\n"
                "heavy = [m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules]\n"
                "heavy += [m for m in sys.modules if 'my_ops' in m or m.startswith('_user_')]\n"
                "print('HEAVY', heavy)" % argv)
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True).stdout
        assert "HEAVY []" in out, (argv, out)


def test_the_registry_reads_names_and_descriptions_without_importing_a_scenario():
    """--list and a scenario's name come from the files (a scenario may import torch at its
    top); what they say is what the imported declarations say."""
    import subprocess
    import sys

    code = ("import sys; from demos.cli import main\n"
            "try: main(['--list'])\nexcept SystemExit: pass\n"
            "print('LOADED', sorted(m for m in sys.modules if m.startswith('demos.scenarios.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True).stdout
    assert "LOADED []" in out, out
    from demos.scenarios import registry
    r = registry()
    assert [r.about(n) for n in r] == [r[n].about for n in r]
    assert list(r) == sorted(r, key=lambda n: (r[n].document, n))


def test_a_scenario_file_that_cannot_be_imported_is_one_line(tmp_path, monkeypatch):
    """Listed from its file, it fails where it is asked for: a ConfigError naming it."""
    from demos.lab.core.scenario import Scenarios
    from demos.lab.core.schema import ConfigError

    package = tmp_path / "some_scenarios"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text('class Config:\n    """It breaks."""\n\n'
                                       'raise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    found = Scenarios("some_scenarios", package)
    assert list(found) == ["broken"] and found.about("broken") == "It breaks."
    with pytest.raises(ConfigError, match="scenario broken: its file could not be imported: "
                                          "RuntimeError: boom"):
        found["broken"]


def test_list_names_every_scenario(capsys):
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(REGISTRY)


def test_command_line_values_get_the_same_checks(capsys):
    all_yaml = str(CONFIGS / "all.yaml")
    assert error_of(capsys, "--config", all_yaml, "--seed", str(10**13)) == \
        f"error: {all_yaml}: seed: must be at most 1e+12 in size, got 10000000000000 " \
        f"(from --seed 10000000000000)"
    assert error_of(capsys, "--config", all_yaml, "--device", "cuda:99999999999999") == \
        f"error: {all_yaml}: device: must be auto, cpu, cuda, cuda:N or mps, got " \
        f"'cuda:99999999999999' (from --device cuda:99999999999999)"
    assert error_of(capsys, "--config", all_yaml, "--device", "cpu\n").startswith(
        f"error: {all_yaml}: device: must be auto, cpu, cuda, cuda:N or mps, got ")
    assert error_of(capsys, "--config", all_yaml, "--only", ",") == \
        "error: --only ,: names no scenario entry; e.g. --only legendre_fit"
    assert error_of(capsys, "--config", all_yaml, "--set", "scenarios[42].lr=1") == \
        "error: --set scenarios[42].lr=1: there are 9 scenario entries, numbered 0..8"
    assert error_of(capsys, "--config", all_yaml, "--set", "scenarios[0].lr=-1") == \
        (f"error: {all_yaml}: scenarios[0].lr: must be > 0, got -1.0 "
         f"(from --set scenarios[0].lr=-1)")


def test_the_path_form_of_set_and_repeated_only(capsys):
    assert main(["--config", str(CONFIGS / "all.yaml"), "--set", "scenarios[1].steps=7",
                 "--only", "my_relu", "--only", "lenet", "--print-config"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert [e["id"] for e in data["scenarios"]] == ["my_relu", "lenet"]
    assert data["scenarios"][0]["steps"] == 7


def test_set_on_an_entry_that_is_not_a_mapping_is_one_line(tmp_path, capsys):
    config = tmp_path / "s.yaml"
    config.write_text("device: cpu\nscenarios:\n  - my_exp\n")
    assert error_of(capsys, "--config", config, "--set", "scenarios[0].lr=1") == \
        "error: --set scenarios[0].lr=1: scenarios[0] is not a mapping (it is 'my_exp')"


@pytest.mark.parametrize("key", ["resume", "checkpoint_every"])
def test_lenet_has_no_checkpoint_keys(tmp_path, capsys, key):
    """lenet trains in seconds: it neither saves nor resumes a checkpoint."""
    config = tmp_path / "lenet.yaml"
    config.write_text(f"device: cpu\nscenarios:\n  - scenario: lenet_ddp\n    {key}: 1\n")
    assert error_of(capsys, "--config", config) == \
        f"error: {config}: scenarios[0].{key}: unknown key"
    assert error_of(capsys, "--config", CONFIGS / "lenet.yaml", "--set",
                    f"scenarios.lenet.{key}=1") == (
        f"error: {CONFIGS / 'lenet.yaml'}: scenarios[0].{key}: unknown key "
        f"(from --set scenarios.lenet.{key}=1)")


@pytest.mark.parametrize("assignment", ["scenarios.lenet.epochs=2", "scenarios[3].epochs=2"])
def test_dry_run_keeps_what_set_gives_explicitly(capsys, assignment):
    """--dry-run shrinks every size, but not one the command line set itself."""
    args = ["--config", str(CONFIGS / "all.yaml"), "--only", "lenet,my_relu", "--dry-run",
            "--print-config"]
    assert main(args) == 0
    assert "  epochs: 1\n" in capsys.readouterr().out
    assert main([*args, "--set", assignment]) == 0
    out = capsys.readouterr().out
    assert "  epochs: 2\n" in out and "  steps: 5\n" in out  # my_relu's still shrinks


def test_a_set_of_an_entrys_key_at_the_top_level_names_the_spelling_that_works(capsys):
    """`--set lr=1e-5` on a config whose entries have lr: the error says how to set it."""
    assert error_of(capsys, "--config", CONFIGS / "legendre_fit.yaml", "--set", "lr=1e-5") == (
        f"error: {CONFIGS / 'legendre_fit.yaml'}: lr: unknown key (expected "
        "one of: deterministic, device, scenarios, seed, stepper_gifs, threads) (from --set "
        "lr=1e-5); lr is a key of the scenario entries: --set scenarios.legendre_fit.lr=1e-5")
    assert "is a key of" not in error_of(capsys, "--config", CONFIGS / "legendre_fit.yaml",
                                         "--set", "lrr=1")
