"""``tlgeo compression`` and ``tlgeo compress`` on a tiny model; the diagnosis's run() with
on-the-fly compression; ``scripts/compress.py`` as a wrapper of the command."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch

from tlgeo.cli import main
from tlgeo.models import save_tiny_model
from tlgeo.runner.results import IDENTITY


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "base", "llama")


def _zero_cols(tiny_dir, root):
    from transformers import AutoModelForCausalLM

    comp = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with torch.no_grad():
        comp.model.layers[1].self_attn.o_proj.weight[:, ::2] = 0
    comp.save_pretrained(root / "zero_cols")
    for f in tiny_dir.iterdir():
        if f.name.startswith(("tokenizer", "special")):
            shutil.copy(f, root / "zero_cols" / f.name)
    shutil.copytree(tiny_dir, root / "same")


def test_cli_compress_diag(tiny_dir, tmp_path, capsys):
    root = tmp_path / "root"
    _zero_cols(tiny_dir, root)
    out = tmp_path / "out"
    pd.DataFrame({"method": ["same", "zero_cols"], "ppl": [10.0, 12.0]}).to_csv(tmp_path / "ppl.csv", index=False)
    args = [
        "compression",
        "--model",
        str(tiny_dir),
        "--root",
        str(root),
        "--methods",
        "same,zero_cols",
        "--prompts",
        "3",
        "--seq-len",
        "32",
        "--out",
        str(out),
        "--ppl",
        str(tmp_path / "ppl.csv"),
    ]
    assert main(args) == 0
    for f in (
        "diag_prompts.csv.gz",
        "diag_layers.csv",
        "table12.csv",
        "ppl_prediction.csv",
        "figure6_local.png",
        "figure6_e2e.png",
        "timing.csv",
    ):
        assert (out / f).is_file(), f
    t = pd.read_csv(out / "table12.csv")
    assert set(t["method"]) == {"same", "zero_cols"} and set(t["ref"]) == {"delta", "z"}
    assert (t[t["method"] == "same"]["mean_e"] == 0).all()
    printed = capsys.readouterr().out
    assert "paper (Table 12)" in printed and "r_e_perp" in printed and "wrote:" in printed
    # resume: nothing recomputed, the same tables
    assert main(args) == 0
    assert "diagnosis of 0 method(s)" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_csv(out / "table12.csv"), t)
    assert main(["compression", "--model", str(tiny_dir), "--root", str(root), "--methods", "gone"]) == 2
    assert "compressed model directory missing" in capsys.readouterr().err
    # the identity columns, then the old files' columns in their order
    assert list(t.columns) == [
        *IDENTITY,
        "method",
        "mode",
        "site",
        "tokens",
        "ref",
        "r_e_perp",
        "rho_e_perp",
        "rho_e_par",
        "share_perp",
        "share_par",
        "mean_e",
        "mean_e_perp",
        "mean_e_par",
        "n_layers",
    ]
    assert list(pd.read_csv(out / "timing.csv").columns) == [
        *IDENTITY,
        "method",
        "seconds",
        "modes",
        "n_prompts",
        "seq_len",
    ]
    prompts = pd.read_csv(out / "diag_prompts.csv.gz")
    assert list(prompts.columns[:12]) == [*IDENTITY, "method", "mode", "site", "layer", "tokens", "prompt"]
    assert {"n_prompts_cfg", "seq_len_cfg", "corpus_cfg", "base_cfg", "model_cfg"} <= set(prompts.columns)


def test_cli_compression_checks_its_ppl_table_before_the_model_loads(tiny_dir, tmp_path, monkeypatch, capsys):
    import tlgeo.models

    root = tmp_path / "root"
    _zero_cols(tiny_dir, root)
    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    args = [
        "compression",
        "--model",
        str(tiny_dir),
        "--root",
        str(root),
        "--methods",
        "same,zero_cols",
        "--out",
        str(tmp_path / "out"),
        "--ppl",
    ]
    assert main([*args, str(tmp_path / "nowhere.csv")]) == 2  # was: left out without a word
    assert "nowhere.csv: no such file" in capsys.readouterr().err
    pd.DataFrame({"method": ["same"], "perplexity": [10.0]}).to_csv(tmp_path / "bad.csv", index=False)
    assert main([*args, str(tmp_path / "bad.csv")]) == 2  # was: a KeyError after the whole diagnosis
    assert "bad.csv: no column ppl (it has method, perplexity)" in capsys.readouterr().err


def test_cli_compress_diag_settings_and_model_changes(tiny_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TLGEO_RUNS", str(tmp_path / "runs"))
    root = tmp_path / "root"
    _zero_cols(tiny_dir, root)
    args = [
        "compression",
        "--model",
        str(tiny_dir),
        "--root",
        str(root),
        "--methods",
        "zero_cols",
        "--prompts",
        "2",
        "--seq-len",
        "16",
        "--modes",
        "local",
    ]
    assert main(args) == 0
    out = tmp_path / "runs" / "compression" / "base"  # default_out("compression/<model>"), never results/
    assert (out / "table12.csv").is_file() and (out / "figure6_local.png").is_file()
    assert not (out / "figure6_e2e.png").exists()
    capsys.readouterr()
    assert main(args + ["--prompts", "3"]) == 2  # other prompts in the same folder: refused
    assert "made with other settings" in capsys.readouterr().err
    assert main(args + ["--corpus", "austen"]) == 2
    assert "corpus" in capsys.readouterr().err
    # the compressed model changed: the method is recomputed, not reused
    from safetensors.torch import load_file, save_file

    w = root / "zero_cols" / "model.safetensors"
    sd = load_file(str(w))
    sd["model.layers.0.mlp.down_proj.weight"][:, ::3] = 0
    save_file(sd, str(w) + ".new", metadata={"format": "pt"})
    w.unlink()
    (root / "zero_cols" / "model.safetensors.new").rename(w)
    assert main(args) == 0
    assert "diagnosis of 1 method(s)" in capsys.readouterr().out
    t = pd.read_csv(out / "table12.csv")
    local = t[(t["site"] == "mlp") & (t["ref"] == "delta")]
    assert (local["mean_e"] > 0).all()  # the new model's MLP error of block 0
    assert main(args + ["--modes", "global"]) == 2
    assert "modes: unknown value(s) ['global']" in capsys.readouterr().err


def test_run_compresses_missing_methods_on_the_fly(tmp_path):
    pytest.importorskip("llmcompressor")
    from tlgeo.compression.analysis import CompressionResult, run
    from tlgeo.compression.config import CompressConfig, CompressionConfig
    from tlgeo.compression.llmc import MANIFEST
    from tlgeo.models import tiny_model

    model = tiny_model("llama")
    comp = CompressConfig(n_calib=4, calib_seq_len=32, pipeline="basic")
    cfg = CompressionConfig(
        methods=("wanda", "rtn_w4g32"), prompts=2, seq_len=16, modes=("local",), root=str(tmp_path / "c"), compress=comp
    )
    said = []
    res = run(model, cfg, out=tmp_path / "out", say=said.append)
    assert isinstance(res, CompressionResult) and set(res.table12["method"]) == {"wanda", "rtn_w4g32"}
    man = json.loads((tmp_path / "c" / "wanda" / MANIFEST).read_text())
    assert man["made_by"] == "compression" and man["base_fingerprint"] and man["checks"]["pattern_ok"]
    assert sum("compressed in" in s for s in said) == 2
    said.clear()
    again = run(model, cfg, say=said.append)  # the models are reused, not recompressed
    assert not any("compress" in s for s in said)
    pd.testing.assert_frame_equal(again.table12, res.table12)
    # other settings: a model made here is recompressed, one made by tlgeo compress is an error
    res2 = run(model, cfg.replace(methods=("wanda",), compress=comp.replace(n_calib=5)), say=said.append)
    assert any("recompressing" in s and "n_calib" in s for s in said) and len(res2.table12)
    man = json.loads((tmp_path / "c" / "wanda" / MANIFEST).read_text())
    (tmp_path / "c" / "wanda" / MANIFEST).write_text(json.dumps({**man, "made_by": "tlgeo compress"}))
    with pytest.raises(ValueError, match="compressed with other settings"):
        run(model, cfg.replace(methods=("wanda",)))
    with pytest.raises(ValueError, match="not methods of the config"):
        run(model, cfg, units=["awq"])


def test_each_dtype_compresses_into_a_folder_of_its_own(tmp_path, monkeypatch):
    """A bfloat16 run compresses its rounded weights next to the float32 models, not over them: a float32
    rerun afterwards reuses its models (their ids unchanged)."""
    pytest.importorskip("llmcompressor")
    from tlgeo.compression.analysis import MODEL_COLUMN, default_root, run
    from tlgeo.compression.config import CompressConfig, CompressionConfig
    from tlgeo.models import tiny_model

    monkeypatch.setenv("TLGEO_CACHE", str(tmp_path / "cache"))
    f32, bf16 = tiny_model("llama"), tiny_model("llama", dtype=torch.bfloat16)
    assert default_root(f32) == tmp_path / "cache" / "compressed" / "tiny-llama"
    assert default_root(bf16) == tmp_path / "cache" / "compressed" / "tiny-llama-bfloat16"
    cfg = CompressionConfig(
        methods=("rtn_w4g32",),
        prompts=2,
        seq_len=16,
        modes=("local",),
        compress=CompressConfig(n_calib=2, calib_seq_len=16, pipeline="basic"),
    )
    first = run(f32, cfg).prompts[MODEL_COLUMN].unique()
    run(bf16, cfg)
    said = []
    again = run(f32, cfg, say=said.append).prompts[MODEL_COLUMN].unique()
    assert not any("compress" in s for s in said) and list(again) == list(first)


def test_cli_compress(tiny_dir, tmp_path, monkeypatch, capsys):
    pytest.importorskip("llmcompressor")
    from tlgeo.compression.llmc import MANIFEST

    monkeypatch.setenv("TLGEO_RUNS", str(tmp_path / "runs"))
    root = tmp_path / "root"
    args = [
        "compress",
        "--model",
        str(tiny_dir),
        "--methods",
        "rtn_w4g32,wanda",
        "--n-calib",
        "4",
        "--calib-seq-len",
        "32",
        "--pipeline",
        "basic",
        "--root",
        str(root),
        "--ppl",
        "--ppl-tokens",
        "64",
        "--context",
        "32",
        "--threads",
        "1",
    ]
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "INFO" not in cap.out + cap.err and "METRIC" not in cap.out + cap.err  # llmcompressor kept at WARNING
    out = tmp_path / "runs" / "compression" / "base"
    for m in ("rtn_w4g32", "wanda"):
        man = json.loads((root / m / MANIFEST).read_text())
        assert man["method"] == m and man["code"] and man["n_calib"] == 4
    assert json.loads((root / "rtn_w4g32" / MANIFEST).read_text())["checks"]["grid_ok"]
    assert len((out / "compress_log.jsonl").read_text().splitlines()) == 2
    ppl = pd.read_csv(out / "ppl.csv")
    assert list(ppl["method"]) == ["base", "rtn_w4g32", "wanda"] and (ppl["ppl"] > 0).all()
    assert set(json.loads((out / "models.json").read_text())) == {"base", "rtn_w4g32", "wanda"}
    assert "wrote:" in cap.out and "ppl.csv" in cap.out
    # rerun: reused, nothing recomputed
    assert main(args) == 0
    assert cap.out.count("already compressed") == 0 and capsys.readouterr().out.count("already compressed") == 2
    assert len(pd.read_csv(out / "ppl.csv")) == 3
    # other settings: refused, never reused; --force recompresses, then the old perplexities are refused
    assert main(args + ["--n-calib", "5"]) == 2
    err = capsys.readouterr().err
    assert "compressed with other settings" in err and "n_calib: 4 -> 5" in err
    assert main(args + ["--n-calib", "5", "--methods", "wanda", "--force"]) == 2
    assert "recompressed or changed since" in capsys.readouterr().err
    assert json.loads((root / "wanda" / MANIFEST).read_text())["n_calib"] == 5
    assert main(args + ["--n-calib", "5", "--methods", "wanda", "--out", str(tmp_path / "fresh")]) == 0
    assert len(pd.read_csv(tmp_path / "fresh" / "ppl.csv")) == 2  # base and wanda
    assert main(["compress", "--model", str(tiny_dir), "--methods", "wanda_x", "--threads", "1"]) == 2
    assert "unknown option 'x'" in capsys.readouterr().err


def test_compress_script_wraps_the_command(capsys):
    from scripts.compress import main as script_main

    with pytest.raises(SystemExit) as e:
        script_main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--n-calib" in text and "--no-compress" in text and "--sensitivity-from" in text and "--verbose" in text
    assert "(default: 32)" in " ".join(text.split())
