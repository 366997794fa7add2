"""The tests' wrong Functions are each a right Function with exactly one method overridden and a
docstring that says what is wrong: those the tests import (tests/fixtures/wrong_functions.py),
and those custom_function loads as a user's code (tests/fixtures/user_fns.py, which must stay
one file a user could have written); the right ones they start from are right."""
import inspect

import pytest
import torch

from demos.documents import functions as documents
from demos.lab.checks import support
from tests.fixtures import user_fns
from tests.fixtures import wrong_functions as wrong

METHODS = ("forward", "setup_context", "backward", "jvp", "vmap")
WRONG = [c for _, c in inspect.getmembers(wrong, inspect.isclass)
         if c.__module__ == wrong.__name__]
USERS_WRONG = [c for _, c in inspect.getmembers(user_fns, inspect.isclass)
               if c.__module__ == user_fns.__name__
               and c.__bases__[0].__module__ == user_fns.__name__]


@pytest.mark.parametrize("cls", WRONG + USERS_WRONG,
                         ids=[c.__name__ for c in WRONG + USERS_WRONG])
def test_a_wrong_function_is_a_right_one_with_one_method_overridden(cls):
    right = cls.__bases__
    assert len(right) == 1 and (right[0].__module__ in (documents.__name__, user_fns.__name__)
                                or right[0].__module__.startswith("demos.scenarios."))
    own = [k for k in vars(cls) if not k.startswith("_")]  # autograd adds _backward_cls
    assert len(own) == 1 and own[0] in METHODS, own
    assert cls.__doc__ and cls.__doc__.strip()


D = torch.float64
RIGHT = {  # the right ones from user_fns, with inputs and a plain-torch reference
    user_fns.Square: ({"x": (4, 3)}, lambda x: x * x),
    user_fns.SquareModern: ({"x": (4, 3)}, lambda x: x * x),
    user_fns.MatVec: ({"a": (3, 3), "v": (3,)}, lambda a, v: a @ v),
    user_fns.DoubleAndCount: ({"x": (3,), "count": (3,)}, lambda x, c: (2 * x, c + 1)),
}


def test_every_right_function_from_user_fns_is_used_here():
    assert {c.__bases__[0] for c in WRONG if c.__bases__[0].__module__ == user_fns.__name__} \
        <= set(RIGHT)


@pytest.mark.parametrize("cls", RIGHT, ids=[c.__name__ for c in RIGHT])
def test_the_right_ones_from_user_fns_fail_no_row_of_the_support_matrix(cls):
    shapes, reference = RIGHT[cls]
    g = torch.Generator().manual_seed(0)
    inputs = {k: torch.randn(s, generator=g, dtype=D).requires_grad_(k != "count")
              for k, s in shapes.items()}
    rows = support.matrix(cls.apply, inputs, reference,
                          rows=[r for r in support.CAPABILITIES if r != "compile"])
    # a right one that is no AMP Function: its matmul under autocast, its backward after it,
    # crash (a real hazard, the autocast row's)
    hazards = ["autocast"] if cls is user_fns.MatVec else []
    assert [k for k, r in rows.items() if r.status == "fails"] == hazards, rows
    assert all("custom_fwd" in rows[k].detail for k in hazards)
