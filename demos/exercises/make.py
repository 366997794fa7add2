"""Writing an exercise: exercise.py (the Function's source with backward's body replaced by its
statement and `raise NotImplementedError`) and grading.yaml, for a document's Function or a
config's custom_function entry."""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import textwrap
from pathlib import Path

from demos.exercises import spec
from demos.exercises.table import DOCUMENTS, MARGIN, Exercise, Input
from demos.lab.core.schema import ConfigError, did_you_mean

BACKWARD_DOC = '''\
"""Return the gradient of the loss with respect to each input of forward ({names}), in
that order, given grad_output, the gradient of the loss with respect to forward's output
(of the output's shape). Each gradient has its input's shape; return None for an input
that needs no gradient (ctx.needs_input_grad says which do).

{maths}

By the chain rule, an input's gradient is grad_output times the derivative of the output
with respect to that input (summed over what the input was broadcast over). Compute it
with tensor operations: no torch.autograd inside backward.
"""
raise NotImplementedError("write backward")'''


def exercises(name: str) -> list[Exercise]:
    """The exercises NAME asks for: a document's, or each custom_function entry of a config."""
    if name in DOCUMENTS:
        return [DOCUMENTS[name]]
    if name.endswith((".yaml", ".yml")):
        return from_config(name)
    raise ConfigError(f"exercise {name}: unknown; name one of {', '.join(DOCUMENTS)}, or a "
                      f"config with custom_function entries{did_you_mean(name, DOCUMENTS)}")


def from_config(path: str) -> list[Exercise]:
    from demos.lab.checks.inputs import shape_of
    from demos.lab.core import config as config_mod
    from demos.scenarios import registry

    cfg = config_mod.load(path, registry(), [])
    found = []
    for i, entry in enumerate(cfg.scenarios):
        if entry.scenario != "custom_function":
            continue
        where = f"{path}: scenarios[{i}]"
        if entry.reference is None:
            raise ConfigError(f"{where}.reference: an exercise needs a reference (plain torch, "
                              f"the grader's ground truth)")
        inputs = []
        for j, s in enumerate(entry.inputs):
            if not s.tensor or s.dtype != "float64":
                raise ConfigError(f"{where}.inputs[{j}]: an exercise takes floating-point "
                                  f"tensors only")
            shape = s.shape if s.shape is not None else shape_of(s.value)
            inputs.append(Input(s.name or f"x{j}", shape, s.low, s.high,
                                requires_grad=s.requires_grad))
        module, _, function = entry.function.spec.rpartition(":")
        found.append(Exercise(entry.id, module, function, entry.reference.spec, "", inputs,
                              second=bool(entry.double_backward)))
    if not found:
        raise ConfigError(f"{path}: no custom_function entry (an exercise is made of one)")
    return found


def load_class(e: Exercise):
    """The class, and the source of its module."""
    from demos.lab.core.user_code import load_object

    spec_ = f"{e.module}:{e.function}"
    cls = load_object(spec_, "function") if e.module.endswith(".py") else \
        getattr(importlib.import_module(e.module), e.function)
    return cls, Path(inspect.getsourcefile(cls) or "").read_text()


def statement(e: Exercise) -> str:
    """exercise.py's text."""
    import torch

    cls, module_source = load_class(e)
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise ConfigError(f"exercise {e.name}: {e.function} is not a torch.autograd.Function")
    source = textwrap.dedent(inspect.getsource(cls))
    maths = e.maths or describe(cls, e.reference)
    maths = "\n".join(textwrap.fill(p, 80) if not p.startswith(" ") else p
                      for p in f"The maths: {maths}".split("\n"))
    names = ", ".join(i.name for i in e.inputs)
    source = blank_backward(source, BACKWARD_DOC.format(names=names, maths=maths), e.name)
    imports = module_imports(module_source if e.module.endswith(".py") else "import torch",
                             any(i.avoid for i in e.inputs))
    example = "\n".join(
        f"    {i.name} = {draw(i)}" for i in e.inputs)
    args = ", ".join(i.name for i in e.inputs)
    return f'''"""Exercise {e.name}: write the backward of {e.function}.

forward is given: leave it as it is. backward's docstring states the maths.
`python exercise.py` tries your backward on the example inputs with torch's gradcheck. It is
graded on other inputs, of other shapes, with random grad_outputs.
"""
{imports}


{source}

def example_inputs():
    """The statement's inputs (float64; the graded ones differ)."""
    g = torch.Generator().manual_seed(0)
{example}
    return {args}{"," if len(e.inputs) == 1 else ""}


if __name__ == "__main__":
    ok = torch.autograd.gradcheck({e.function}.apply, example_inputs(), raise_exception=False)
    print("gradcheck:", "passed" if ok else "FAILED")
'''


def draw(i: Input) -> str:
    """An example input's expression."""
    shape = ", ".join(map(str, i.shape or []))
    if i.low is None:
        x = f"torch.randn({shape}, generator=g, dtype=torch.float64)"
    else:
        x = (f"torch.empty({shape}, dtype=torch.float64).uniform_({i.low}, {i.high}, "
             f"generator=g)")
    for k in i.avoid:  # kept away from a kink
        x = f"away({x}, {k})"
    return x + (".requires_grad_()" if i.requires_grad else "")


def describe(cls, reference: str) -> str:
    """The maths of a config's Function: its docstring, and its reference's source."""
    from demos.lab.core.user_code import load_object

    doc = inspect.getdoc(cls) or ""
    try:
        ref_source = textwrap.dedent(inspect.getsource(load_object(reference, "reference")))
    except (OSError, TypeError):
        ref_source = ""
    lines = [doc] if doc else []
    if ref_source:
        lines.append("forward computes what this plain torch computes:\n\n" +
                     textwrap.indent(strip_docstring(ref_source), "    "))
    return "\n\n".join(lines) or "as forward computes it."


def strip_docstring(source: str) -> str:
    """A function's source without its docstring."""
    tree = ast.parse(source)
    fn = tree.body[0]
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(fn):
        lines = source.splitlines()
        doc = fn.body[0]
        del lines[doc.lineno - 1:doc.end_lineno]
        return "\n".join(lines)
    return source


def blank_backward(source: str, body: str, name: str) -> str:
    """The class source `source` with backward's body replaced by `body` (its docstring and
    the raise); comments inside the old body go with it."""
    tree = ast.parse(source)
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    backward = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                     and n.name == "backward"), None)
    if backward is None:
        raise ConfigError(f"exercise {name}: its class defines no backward of its own")
    lines = source.splitlines()
    first = backward.body[0]
    indent = " " * first.col_offset
    end = backward.end_lineno or first.lineno
    new = textwrap.indent(body, indent).splitlines()
    return "\n".join([*lines[:first.lineno - 1], *new, *lines[end:]]) + "\n"


def module_imports(source: str, away: bool) -> str:
    """The top-level imports of the class's module (torch at least); `away` when needed."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = [("\n".join(lines[n.lineno - 1:n.end_lineno]))
             for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
             and not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("demos"))
             and not (isinstance(n, ast.ImportFrom) and n.module == "typing")]
    if not any(line.strip() == "import torch" for line in found):
        found.append("import torch")
    if away:
        found.append(f'''

def away(x, kink):
    """x moved to at least {MARGIN} from the kink (where the derivative jumps)."""
    return kink + (x - kink).sign() * (x - kink).abs().clamp(min={MARGIN})''')
    return "\n".join(found)


def write(name: str, output_dir: str) -> list[Path]:
    """The exercise(s) NAME asks for, into output_dir (several: a folder each, by id); the
    files written."""
    made = exercises(name)
    written = []
    for e in made:
        folder = Path(output_dir) if len(made) == 1 else Path(output_dir) / e.name
        text = statement(e)
        reference = e.reference
        if os.path.isabs(reference.rpartition(":")[0]):
            reference = os.path.relpath(reference.rpartition(":")[0], folder.resolve()) + \
                ":" + reference.rpartition(":")[2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for file, content in (("exercise.py", text),
                                  ("grading.yaml", spec.text(e, reference))):
                (folder / file).write_text(content)
                written.append(folder / file)
        except OSError as err:
            raise ConfigError(f"--output-dir {output_dir}: cannot write there: "
                              f"{err.strerror or err}") from None
    return written
