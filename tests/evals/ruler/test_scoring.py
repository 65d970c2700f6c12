import pytest

from tlgeo.evals.ruler import first_word, string_match_all, string_match_part


def test_scoring():
    refs = [["123", "456"], ["789"], ["abc", "def"]]
    preds = ["the numbers are 123 and 999", "789.", "ABC and DEF"]
    assert string_match_all(preds, refs) == pytest.approx(100 * (0.5 + 1 + 1) / 3)
    assert string_match_part(preds, refs) == pytest.approx(100.0)
    assert string_match_all(["nothing"], [["1"]]) == 0.0
    assert string_match_part(["x 1", "y"], [["1", "2"], ["3"]]) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        string_match_all(["a"], [["a"], ["b"]])
    with pytest.raises(ValueError):
        string_match_all([], [])
    assert first_word(["No, it is not.", "not yes", " Yes", ""], [["no"], ["no"], ["yes"], ["yes"]]) == 50.0
