import json

import pytest

from tlgeo.results import ResultLog


def test_log_resumes_and_refuses_duplicates(tmp_path):
    p = tmp_path / "r.jsonl"
    log = ResultLog(p, ["site", "s"])
    log.add({"site": "attn", "s": 0.0, "ppl": 1.5})
    with pytest.raises(ValueError, match="already stored"):
        log.add({"site": "attn", "s": 0.0, "ppl": 9.9})
    with pytest.raises(KeyError, match="lacks key"):
        log.add({"site": "attn"})
    # an interruption in the middle of a write leaves a torn line
    with p.open("a") as f:
        f.write('{"site": "mlp", "s": 0.')
    again = ResultLog(p, ["site", "s"])
    assert again.done(site="attn", s=0.0) and not again.done(site="mlp", s=0.0)
    again.add({"site": "mlp", "s": 0.0, "ppl": 2.0})
    rows = [json.loads(l) for l in p.read_text().splitlines()]
    assert [r["site"] for r in rows] == ["attn", "mlp"]
    assert again.frame().shape == (2, 3)
