import json

import pytest

from tlgeo.runner.results import ResultLog


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


def test_two_identities_share_a_log_and_never_see_each_others_rows(tmp_path):
    from tlgeo.runner.results import run_state

    p = tmp_path / "r.jsonl"
    a = {"model": "m", "weights": "fp-a", "dtype": "float32"}
    b = {**a, "dtype": "bfloat16"}
    ResultLog(p, ["site"], identity=a).add({"site": "attn", "ppl": 1.0})
    log_b = ResultLog(p, ["site"], identity=b)
    assert not log_b.done(site="attn") and log_b.rows == [] and log_b.frame().empty
    log_b.add({"site": "attn", "ppl": 2.0})  # the same key of another identity is not a duplicate
    with run_state() as state:  # a run says whose rows it reads, and its state lists it once
        state.saw(a)
        state.saw(dict(a))
        again = ResultLog(p, ["site"], identity=a)
        assert again.get(site="attn")["ppl"] == 1.0 and again.get(site="attn")["ppl"] == 1.0
    assert again.resumed == 1 and state.lines() == [f"resumed 1 row from {p}"] and state.seen == [a]
    with run_state() as other:
        ResultLog(p, ["site"], identity=a).get(site="attn")
    assert other.lines() == [f"resumed 1 row from {p}"] and state.lines() == [f"resumed 1 row from {p}"]  # apart
    rows = [json.loads(l) for l in p.read_text().splitlines()]
    assert [(r["dtype"], r["ppl"]) for r in rows] == [("float32", 1.0), ("bfloat16", 2.0)]  # both kept, stamped


def test_stamp_puts_the_identity_first_and_of_identity_reads_it_back():
    import pandas as pd

    from tlgeo.runner.results import of_identity, stamp

    ident = {"model": "m", "weights": "fp-0123456789ab"}
    df = stamp(pd.DataFrame({"x": [1, 2], "model": ["old", "old"]}), ident)
    assert list(df.columns) == ["model", "weights", "x"] and (df["model"] == "m").all()
    both = pd.concat([df, stamp(pd.DataFrame({"x": [3]}), {**ident, "weights": "fp-other"})])
    assert list(of_identity(both, ident)["x"]) == [1, 2]
    assert of_identity(pd.DataFrame({"x": [1]}), ident).empty  # a table from before identities: not this run's


def test_every_log_in_the_package_says_whose_rows_it_holds():
    """Each ``ResultLog(...)`` in tlgeo names its ``identity`` (the model's, or ``{}`` where rows of
    several models are read on purpose): none falls back on an ambient identity by accident."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "tlgeo"
    missing = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "ResultLog":
                if not any(k.arg == "identity" for k in node.keywords):
                    missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not missing, f"ResultLog without identity= at {missing}"


def test_merge_csv_replaces_rows_of_the_same_key_missing_values_included(tmp_path):
    import numpy as np
    import pandas as pd

    from tlgeo.runner.results import merge_csv

    path = tmp_path / "t.csv"
    first = pd.DataFrame({"site": ["attn", "mlp", "attn"], "scale": [0.0, 0.1 + 0.2, np.nan], "v": [1.0, 2.0, 3.0]})
    assert merge_csv(path, first, ["site", "scale"]) == 3
    again = pd.DataFrame({"site": ["mlp", "attn"], "scale": [0.1 + 0.2, np.nan], "v": [20.0, 30.0]})
    assert merge_csv(path, again, ["site", "scale"]) == 3  # both rows replaced (a float key, a missing one)
    got = pd.read_csv(path).sort_values("v")
    assert list(got["v"]) == [1.0, 20.0, 30.0]


def test_stamp_puts_the_identity_first_as_a_rerun_reads_it():
    """A table computed with the identity columns among the others (a groupby over them) is written with them
    first, as the rows a rerun reads back from its log: the same CSV either way (found by bench_faults.py)."""
    import pandas as pd

    from tlgeo.runner.results import stamp

    ident = {"model": "m", "weights": "w"}
    df = pd.DataFrame({"site": ["a"], "model": ["m"], "x": [1.0], "weights": ["w"]})
    assert list(stamp(df, ident).columns) == ["model", "weights", "site", "x"]
    first = stamp(df, ident)
    assert stamp(first, ident) is first


def test_content_digest_tells_content_apart_and_is_stable():
    import numpy as np
    import torch

    from tlgeo.runner.results import content_digest

    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert content_digest(ids, "logit_diff") == content_digest(ids.clone(), "logit_diff")
    assert content_digest(ids) == content_digest(ids.numpy())  # a tensor digests as its values
    others = [ids.flip(0), ids.reshape(3, 2), ids.to(torch.int32), ids[:, :2]]
    assert len({content_digest(x) for x in [ids, *others]}) == 5  # values, shape, dtype, length
    assert content_digest("ab", "c") != content_digest("a", "bc")  # parts are delimited
    assert content_digest({"a": 1, "b": 2}) == content_digest({"b": 2, "a": 1})
    assert content_digest(1) != content_digest("1") != content_digest(np.int64(2))
    with pytest.raises(TypeError, match="cannot digest a object"):
        content_digest(object())


def test_a_row_of_other_content_under_the_same_settings_is_computed_again_and_said(tmp_path):
    from tlgeo.runner.results import run_state

    path = tmp_path / "log.jsonl"
    log = ResultLog(path, ("task", "layer", "inputs"), identity={}, content=("inputs",))
    log.extend([{"task": "capitals", "layer": l, "inputs": "aaaa", "value": l} for l in range(3)])
    with run_state() as state:
        again = ResultLog(path, ("task", "layer", "inputs"), identity={}, content=("inputs",))
        assert again.get(task="capitals", layer=0, inputs="bbbb") is None  # other prompts under the same name
        assert again.get(task="capitals", layer=0, inputs="bbbb") is None
        assert again.get(task="capitals", layer=5, inputs="bbbb") is None  # settings never logged: only new
        assert again.get(task="capitals", layer=1, inputs="aaaa")["value"] == 1  # the same content: read back
    assert again.changed == 1 and again.resumed == 1
    said = state.lines()
    assert (
        len(said) == 2
        and said[0].startswith("resumed 1 row from")
        and said[1].startswith(
            f"recomputed 1 row of {path}: the rows logged there under the same settings measured other inputs"
        )
    )
    again.add({"task": "capitals", "layer": 0, "inputs": "bbbb", "value": 10})  # both contents kept in the log
    assert (
        ResultLog(path, ("task", "layer", "inputs"), identity={}, content=("inputs",)).get(
            task="capitals", layer=0, inputs="aaaa"
        )["value"]
        == 0
    )
    with pytest.raises(ValueError, match=r"content column\(s\) \['digest'\] are not key columns"):
        ResultLog(path, ("task", "layer"), identity={}, content=("digest",))


def test_the_fingerprint_tells_apart_models_that_differ_in_one_weight_its_sample_misses():
    """Two prunings of SmolLM2 that differ in 3,056 of 134.5 M weights had one fingerprint (the sample of 64
    values per tensor missed every difference), so a resume log could not tell them apart."""
    import torch

    from tlgeo.models import tiny_model
    from tlgeo.runner.identity import SAMPLES, weights_fingerprint

    a, b = tiny_model("llama"), tiny_model("llama")
    assert weights_fingerprint(a) == weights_fingerprint(b)
    w = b.original_model.model.layers[1].mlp.down_proj.weight
    flat = w.detach().reshape(-1)
    step = (flat.numel() - 1) // (SAMPLES - 1)
    with torch.no_grad():
        flat[step // 2] = 0.0 if flat[step // 2] != 0 else 1.0  # between two sampled positions
    assert weights_fingerprint(a) != weights_fingerprint(b)
    c = tiny_model("llama")
    c.to(torch.float64)  # another dtype: another fingerprint, as before
    assert weights_fingerprint(c) != weights_fingerprint(a)


def test_the_bit_sum_in_chunks_equals_one_wrapping_sum(monkeypatch):
    """The fingerprint's exact sum is taken in chunks (so that no 64-bit copy of a whole tensor, e.g. an
    embedding, is made); chunked, it is torch's one 64-bit wrapping sum, for every width, overflow included."""
    import torch

    from tlgeo.runner import identity

    monkeypatch.setattr(identity, "_BIT_SUM_CHUNK", 7)
    g = torch.Generator().manual_seed(0)
    big = torch.full((50,), 2**62, dtype=torch.int64)  # sums past 2**63: wraps
    for flat in (
        torch.randn(101, generator=g),
        torch.randn(64, generator=g, dtype=torch.float64),
        torch.randn(33, generator=g).to(torch.bfloat16),
        big.view(torch.float64),
        torch.zeros(0),
    ):
        ints = flat.view(identity._BITS[flat.element_size()])
        assert identity._bit_sum(flat) == int(ints.sum(dtype=torch.int64))
    assert identity._bit_sum(big.view(torch.float64)) == int(big.sum())  # the same wrapped value as torch's


def test_a_table_cut_short_keeps_its_whole_rows_and_other_damage_is_refused(tmp_path):
    """Issue 67: a results table that does not read as tlgeo wrote it is never merged as it reads: cut short (no
    end to its last line, compressed data that ends early) its whole rows are kept and the run says so; any other
    damage is one error naming the file."""
    import gzip

    import pandas as pd

    from tlgeo.runner.results import DamagedTableError, merge_csv, read_table, run_state

    df = pd.DataFrame({"model": ["m"] * 3, "unit": [1, 2, 3], "n": [16, 16, 16], "ok": [True, False, True]})
    for name in ("t.csv", "t.csv.gz"):
        path = tmp_path / name
        merge_csv(path, df, ["model", "unit"])
        text = df.to_csv(index=False).encode()
        data = path.read_bytes()
        cut = data[: len(data) - 7] if name.endswith(".gz") else text[: len(text) - 4]  # inside the last row
        path.write_bytes(cut)
        with run_state() as state:
            got = read_table(path)
        assert got["unit"].tolist()[:2] == [1, 2] and got["n"].dtype == "int64", got  # no garbage, no floats
        assert any(str(path) in line and "cut short" in line for line in state.lines()), state.lines()
        with run_state():
            merge_csv(path, df[df["unit"] == 3], ["model", "unit"])  # the rerun's rows: the whole table again
        back = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
        assert back == text
    path = tmp_path / "t.csv"
    path.write_text(path.read_text().replace("2,16,False", "2,16"))  # a row of too few fields, not at the end
    with pytest.raises(DamagedTableError, match=f"{path} does not read as the table tlgeo wrote"):
        merge_csv(path, df, ["model", "unit"])
    assert "2,16\n" in path.read_text()  # left as it was found
