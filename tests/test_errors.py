"""The user's errors: one line, and still the IndexError / KeyError a caller may catch."""

import pytest

from tlgeo.errors import OutOfRangeError, UnknownNameError, UserError, spans


def test_spans_writes_runs_of_integers():
    assert spans([5, 6, 7, 9, 400, 8]) == "5-9, 400" and spans([3]) == "3" and spans([]) == ""
    assert spans(["a", 1]) == "a, 1"


def test_the_users_errors_are_their_builtin_kinds_too():
    with pytest.raises(IndexError):
        raise OutOfRangeError("layer(s) 3 out of range")
    with pytest.raises(KeyError) as e:
        raise UnknownNameError("no command 'x'; choose from ['a']")
    assert str(e.value) == "no command 'x'; choose from ['a']" and isinstance(e.value, UserError)
