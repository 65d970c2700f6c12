import functools

import pytest

from tlgeo.families import FAMILIES

ATTENTION = [f for f, fam in FAMILIES.items() if fam.attention]


@functools.lru_cache(maxsize=None)
def _model(name: str):
    from tlgeo.models import tiny_model

    return tiny_model(name)


@pytest.fixture(scope="session")
def family_model():
    """``family_model(name)``: the family's tiny random model, booted once per test session."""
    return _model
