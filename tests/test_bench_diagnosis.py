"""The diagnosis benchmark's machinery (tests/bench_diagnosis.py, make bench-diagnosis): the
mutation operators give valid code at every site, each mutant differs from the right backward
as its operator says, a few known mutants get their kinds from the lab, and the right Functions
are right. The benchmark itself is its own command: seconds here."""
from __future__ import annotations

import ast
import collections

import pytest

from demos.lab.checks.diagnose import against_reference
from tests import bench_diagnosis as bench
from tests import mutants as M
from tests.fixtures.mutation_targets import TARGETS

BY_NAME = {t.name: t for t in TARGETS}


def all_mutants(target):
    return list(M.mutants(target.function, set(bench.floating(target.inputs())), target.name))


def test_every_operator_gives_valid_code_and_at_least_500_mutants_in_all():
    count: collections.Counter = collections.Counter()
    for t in TARGETS:
        sources = set()
        for m in all_mutants(t):
            ast.parse(m.source)  # unparsed, parsed again
            assert m.source not in sources, (t.name, m.site.what)  # each site its own change
            sources.add(m.source)
            assert issubclass(m.function, t.function) and m.function.backward is not \
                t.function.backward
            count[m.operator] += 1
    assert set(count) == set(M.OPERATORS), set(M.OPERATORS) - set(count)
    assert sum(count.values()) >= 500
    assert len({t.function for t in TARGETS}) >= 25


def test_the_right_functions_are_right():
    for t in TARGETS:
        probe = bench.Probe(t)
        assert probe.behaviour(t.function.apply)[0] == "unchanged", t.name


def mutant(target: str, operator: type, what: str) -> M.Mutant:
    found = [m for m in all_mutants(BY_NAME[target]) if m.operator is operator
             and what in m.site.what]
    found = [m for m in found if m.site.what == what] or found  # the exact one, if any
    assert len(found) == 1, [m.site.what for m in all_mutants(BY_NAME[target])
                             if m.operator is operator]
    return found[0]


def test_an_operator_changes_the_source_as_it_says():
    m = mutant("LegendrePolynomial3", M.Factor, "the literal 1.5")
    assert "grad_output * 3.0 * (5 * input ** 2 - 1)" in m.source
    m = mutant("MyReLU", M.Invert, "input < 0")
    assert "grad_input[input >= 0] = 0" in m.source
    m = mutant("LinearFunction", M.Drop, "from grad_weight")
    assert "torch.ones_like(grad_output).t().mm(input)" in m.source
    assert "grad_input = grad_output.mm(weight)" in m.source  # the others keep it
    m = mutant("MatMul", M.Transpose, "b.t() -> b")
    assert "return (grad_output @ b, a.t() @ grad_output)" in m.source
    m = mutant("Softmax", M.WrongDim, "-1 -> 0")
    assert "(grad_output * y).sum(0, keepdim=True)" in m.source
    m = mutant("SiLU", M.InputForOutput, "x where y is meant")
    assert "s + x * (1 - s)" in m.source
    m = mutant("Softmax", M.Detached, "y.detach()")
    assert "y.detach() * (grad_output - (grad_output * y.detach())" in m.source


KNOWN = [  # (target, operator, site, the kind its diagnosis must be)
    ("MyExp", M.Sign, "-(grad_output * y)", "sign"),
    ("LegendrePolynomial3", M.Factor, "the literal 1.5", "factor"),
    ("MyExp", M.Drop, "grad_output dropped", "not multiplied"),
    ("MultiplyAdd", M.Swap, "grad_w and grad_b", "swapped"),
    ("MyReLU", M.Invert, "input < 0", "inverted condition"),
    ("Softplus", M.AtMinus, "-x for x", "transformed input"),
    ("MatMul (square)", M.Transpose, "b.t() -> b", "transformed input"),
    ("LinearFunction", M.MeanForSum, "grad_output.sum(0)", "factor"),
    ("Cube", M.InputForOutput, "x where y is meant", "no simple pattern"),  # a known miss
    ("Mul", M.NoneFor, "None for grad_output * w", "zero"),
]


@pytest.mark.parametrize("target, operator, what, kind", KNOWN,
                         ids=[f"{k[0]}-{k[1].__name__}" for k in KNOWN])
def test_a_known_mutant_gets_its_kind(target, operator, what, kind):
    t, m = BY_NAME[target], mutant(target, operator, what)
    args = t.inputs()
    names = bench.floating(args)

    def fixed(fn):  # fn of the floating inputs alone, the others put back in their places
        return lambda *xs: fn(*(dict(zip(names, xs)).get(k, v) for k, v in args.items()))

    d = against_reference(fixed(m.function.apply), fixed(t.reference),
                          {k: args[k] for k in names})
    assert d is not None and d.kind == kind, d
    expected = "wrong" if kind == "no simple pattern" else "right"
    assert M.verdict(operator, m.site, d.kind, d.says) == expected


def test_the_lab_names_a_mutant_the_public_way(tmp_path):
    t = BY_NAME["LinearFunction"]
    m = mutant("LinearFunction", M.MeanForSum, "grad_output.sum(0)")
    got = bench.lab(m.function, t, t.inputs(), False, str(tmp_path))
    assert got["caught"] and got["kind"] == "factor" and "averages" in got["says"], got
    assert bench.lab(t.function, t, t.inputs(), True, str(tmp_path))["caught"] is False
    probe = bench.Probe(t)
    assert probe.behaviour(m.function.apply)[0] == "first"
    assert probe.torch_catch(m.function.apply, False) and probe.ones_catch(m.function.apply)
    dropped = mutant("LinearFunction", M.Drop, "grad_output dropped").function.apply
    assert not probe.ones_catch(dropped)  # grad_output = ones cannot see it


def test_a_detached_saved_tensor_changes_the_second_derivative_alone():
    probe = bench.Probe(BY_NAME["Softmax"])
    m = mutant("Softmax", M.Detached, "y.detach()")
    assert probe.behaviour(m.function.apply)[0] == "second"
    assert probe.torch_catch(m.function.apply, True) and not probe.ones_catch(m.function.apply)


def test_the_docs_hold_the_generated_table_between_its_markers():
    text = bench.DOC.read_text()
    assert text.count(bench.BEGIN) == 1 and text.count(bench.END) == 1
    assert text.index(bench.BEGIN) < text.index(bench.END)
