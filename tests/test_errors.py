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


def test_every_unknown_name_has_one_base_and_keeps_its_old_kind():
    """A model, family, site, corpus, task or method nobody registered is an UnknownNameError (one line from the
    command line); those that were a ValueError still are, for the callers that catch that."""
    from tlgeo.compression.methods import UnknownMethodError
    from tlgeo.data import UnknownCorpusError
    from tlgeo.evals.zeroshot import UnknownTaskError
    from tlgeo.families import UnknownFamilyError
    from tlgeo.hooks.sites import UnknownSiteError
    from tlgeo.models import UnknownModelError

    for cls in (UnknownMethodError, UnknownCorpusError, UnknownTaskError, UnknownFamilyError, UnknownModelError):
        assert issubclass(cls, UnknownNameError) and issubclass(cls, ValueError), cls
    assert issubclass(UnknownSiteError, UnknownNameError) and issubclass(UnknownSiteError, KeyError)
    assert str(UnknownFamilyError("unknown family 'x'")) == "unknown family 'x'"  # not KeyError's quoted repr


def test_a_bad_value_is_a_users_error_and_still_a_value_error():
    from tlgeo.errors import InputError
    from tlgeo.families import UnsupportedError

    for cls in (InputError, UnsupportedError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError), cls
