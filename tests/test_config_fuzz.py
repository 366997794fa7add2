"""Hostile and generated configs: a valid config or one clean line, never anything else."""
import copy
import os
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demos.cli import main
from demos.lab.core import config, overrides
from demos.lab.core.schema import ConfigError
from demos.scenarios import registry
from tests.conftest import CONFIGS

REGISTRY = registry()

VALID = yaml.safe_load((CONFIGS / "all.yaml").read_text())
FIELDS = sorted({f for s in REGISTRY.values() for f in s.config.__dataclass_fields__} |
                {"device", "seed", "scenarios", "expect", "value", "min", "nonsense"})

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**15),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["5e-6", "1e400", "-1", "nan", ".inf", "cuda:7", "legendre_fit", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), inner, max_size=4)),
    max_leaves=20)


def assert_contract(load):
    """Either a RunConfig, or a ConfigError of one short line; nothing else escapes."""
    try:
        result = load()
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg and len(msg) < 1000, msg
        return
    assert isinstance(result, config.RunConfig)
    assert result.scenarios and all(e.id for e in result.scenarios)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_any_top_level_value(value):
    assert_contract(lambda: config.build_run(value, REGISTRY) if isinstance(value, dict)
                    else config.load_data(value, "x.yaml", REGISTRY))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 8), st.sampled_from(FIELDS), values)
def test_one_field_of_a_valid_config_replaced(index, key, value):
    raw = copy.deepcopy(VALID)
    raw["scenarios"][index][key] = value
    assert_contract(lambda: config.build_run(raw, REGISTRY))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["seed", "device", "scenarios.lenet.lr", "scenarios.my_relu.expect",
                        "scenarios.legendre_fit.expect.params.b.value", "scenarios.x.y",
                        "scenarios", "scenarios.lenet", "a.b.c"]),
       st.text(max_size=30))
def test_any_set_override(key, text):
    raw = copy.deepcopy(VALID)

    def load():
        overrides.apply_set(raw, f"{key}={text}")
        return config.build_run(raw, REGISTRY)
    assert_contract(load)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_as_a_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_bytes(data)
    assert_contract(lambda: config.load(str(path), REGISTRY))


def bomb(levels=9):
    lines = ["scenarios:", "  - scenario: legendre_fit", "    init:",
             "      - &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"      - &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
              for i in range(1, levels + 1)]
    return "\n".join(lines + [f"    lr: *a{levels}"]) + "\n"


@pytest.mark.parametrize("text, message", [
    (bomb(), "line 8: holds more than 100,000 values (counting each use of an alias, *name); "
             "refusing it"),
    ("scenarios: " + "[" * 70 + "]" * 70 + "\n", "line 1: nested more than 64 levels deep; "
                                                  "refusing it"),
    ("scenarios: &s [*s]\n", "line 1: an alias refers to the value that contains it"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: 1:30\n",
     "line 3: 1:30 is a YAML 1.1 base-60 number (90); write 90 if you mean it, or quote it"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: 010\n",
     "line 3: 010 is a YAML 1.1 octal number (8); write 8 if you mean it, or quote it"),
    ("scenarios: " + "[" * 3000 + "]" * 3000 + "\n", "invalid YAML: nested too deeply"),
    ("scenarios:\n  - scenario: !!python/object/apply:os.system [echo hi]\n",
     "invalid YAML: line 2, column 15: a tag that would build a Python object; configs hold plain "
     "values only (could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/object/apply:os.system')"),
    ("scenarios:\n\t- scenario: lenet\n", "invalid YAML: line 2, column 1: found character '\\t' "
                                          "that cannot start any token (YAML indents with spaces, "
                                          "not tabs)"),
    ("# only a comment\n", "empty file"),
    ("\n\n", "empty file"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: 1e400\n",
     "scenarios[0].steps: must be an integer, got '1e400'"),
    ("scenarios:\n- scenario: legendre_fit\n  lr: 1e400\n",
     "scenarios[0].lr: must be a finite number, got inf"),
    ("scenarios:\n- scenario: legendre_fit\n  steps: 100000000000000000000\n",
     "scenarios[0].steps: must be at most 1e+12 in size, got 100000000000000000000"),
    ("scenarios:\n- scenario: legendre_fit\n  lr: .inf\n",
     "scenarios[0].lr: must be a finite number, got inf"),
    ("scenarios:\n- {scenario: legendre_fit, steps: yes}\n",
     "scenarios[0].steps: must be an integer, got True"),
])
def test_hostile_files_get_one_line_quickly(tmp_path, capsys, text, message):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    start = time.perf_counter()
    assert main(["--config", str(path)]) == 2
    assert time.perf_counter() - start < 5
    assert capsys.readouterr().err == f"error: {path}: {message}\n"


@pytest.mark.parametrize("data, message", [
    (b"\x00\x01\x02\xff", "binary file, not YAML"),
    ("scenarios: [{scenario: caf\xe9}]".encode("latin-1"), "not UTF-8 text (byte 26)"),
    (b"# x\n" * 300_000, "larger than 1024 KiB; not a config file"),
])
def test_files_that_are_not_yaml_text(tmp_path, capsys, data, message):
    path = tmp_path / "x.yaml"
    path.write_bytes(data)
    assert main(["--config", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {path}: {message}\n"


def test_an_unreadable_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "x.yaml"
    path.write_text("seed: 0\n")

    real = os.open

    def denied(name, *args, **kwargs):  # as a file of mode 000 is to anyone but root
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(os, "open", denied)
    assert main(["--config", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {path}: cannot read: Permission denied\n"
