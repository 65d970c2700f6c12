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


def test_a_large_log_is_looked_up_by_key_not_scanned(tmp_path, monkeypatch):
    log = ResultLog(tmp_path / "big.jsonl", ["unit", "layer"])
    log.extend({"unit": f"u{i}", "layer": j, "x": i * j} for i in range(300) for j in range(30))  # 9,000 rows
    assert len((tmp_path / "big.jsonl").read_text().splitlines()) == 9000
    again = ResultLog(tmp_path / "big.jsonl", ["unit", "layer"])
    assert sum(again.done(unit=f"u{i}", layer=j) for i in range(300) for j in range(30)) == 9000
    calls = []
    key = again._key
    monkeypatch.setattr(again, "_key", lambda row: calls.append(1) or key(row))
    assert again.done(unit="u299", layer=29) and len(calls) == 1  # one key made, no scan of 9,000 rows
    assert again.get(unit="u7", layer=3)["x"] == 21 and again.get(unit="u7", layer=30) is None
    with pytest.raises(ValueError, match="already stored"):
        again.extend([{"unit": "u9", "layer": 40}, {"unit": "u9", "layer": 40}])
    assert len(again.rows) == 9000  # a refused batch stores nothing
