"""The planner (tlgeo.planner, tlgeo plan): shapes from configs, FLOPs and memory, per analysis."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tlgeo.cli import main
from tlgeo.planner import CALIBRATION_MODEL, DEVICES, Work, calibration, estimate, model_shape

# total parameters as each model card states them (billions)
PUBLISHED = {
    "Qwen/Qwen3-0.6B": 0.6,
    "Qwen/Qwen3-1.7B": 1.7,
    "Qwen/Qwen3-4B": 4.0,
    "Qwen/Qwen3-8B": 8.2,
    "Qwen/Qwen3-30B-A3B": 30.5,
    "meta-llama/Llama-3.2-3B": 3.21,
    "TinyLlama/TinyLlama-1.1B": 1.1,
    "google/gemma-2-9b": 9.24,
    "EleutherAI/pythia-410m": 0.405,
    "EleutherAI/pythia-1.4b": 1.41,
    "facebook/opt-1.3b": 1.3,
    "distilgpt2": 0.082,
    "google/gemma-3-1b-pt": 1.0,
    "openai/gpt-oss-20b": 20.9,
}  # these two from their config.json alone


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_seed_shapes_have_their_published_size(name):
    assert model_shape(name).params / 1e9 == pytest.approx(PUBLISHED[name], rel=0.02)


def test_a_seed_model_without_attention_is_refused_by_name():
    with pytest.raises(ValueError, match="mamba has neither"):
        model_shape("state-spaces/mamba-130m-hf")


@pytest.mark.parametrize("kind", ["llama", "gpt_neox", "gpt2"])
def test_a_shape_counts_the_model_s_own_matrices(kind, tmp_path):
    from transformers import AutoModelForCausalLM

    from tlgeo.models import save_tiny_model, tiny_config

    hf = AutoModelForCausalLM.from_config(tiny_config(kind))
    seen, matrices = set(), 0
    for p in hf.parameters():  # tied weights once; norms and biases (vectors) are left out
        if p.ndim == 2 and id(p) not in seen and "position" not in str(p.shape):
            seen.add(id(p))
            matrices += p.numel()
    positions = sum(m.weight.numel() for n, m in hf.named_modules() if n.endswith(("wpe", "embed_positions")))
    assert model_shape(f"tiny:{kind}").params == matrices - positions
    save_tiny_model(tmp_path / kind, kind)  # a local directory and its config.json: the same shape
    folder, file = model_shape(str(tmp_path / kind)), model_shape(str(tmp_path / kind / "config.json"))
    assert dataclasses.replace(folder, name="") == dataclasses.replace(file, name="")
    assert model_shape(str(tmp_path / kind)).params == matrices - positions


def test_moe_counts_all_experts_in_memory_and_the_routed_ones_in_flops():
    moe = model_shape("Qwen/Qwen3-30B-A3B")
    dense_flops = dataclasses.replace(moe, name="x", n_experts=0, experts_per_token=0).forward_flops(1, 1)
    assert moe.forward_flops(1, 1) > dense_flops  # 8 routed experts of 768 against one MLP of 768
    assert moe.forward_flops(1000, 1) == pytest.approx(1000 * moe.forward_flops(1, 1))
    assert moe.params > 10 * (moe.forward_flops(1, 1) / 2)  # 128 experts held, 8 used per token


def test_estimate_adds_up_and_says_what_does_not_fit():
    shape = model_shape("Qwen/Qwen3-8B")
    cal = calibration().replace("test.hook", 1.0)  # a hook that doubles a forward's time
    df = estimate(
        shape,
        [Work("a", 4096, 1024, 4), Work("b", 8192, 1024, 4, hooks={"test.hook": 1}, kept_bytes=2**34)],
        "h100",
        "bfloat16",
        calib=cal,
    )
    a, b, total = (df.iloc[i] for i in range(3))
    assert a["weights_gib"] == pytest.approx(shape.params * 2 / 2**30)
    assert b["seconds"] == pytest.approx(4 * a["seconds"])  # twice the tokens, twice the overhead
    assert b["kept_gib"] == 16 and total["peak_gib"] == b["peak_gib"] and total["fits"] == (b["peak_gib"] <= 80)
    big = estimate(model_shape("Qwen/Qwen3-30B-A3B"), [Work("x", 1, 1)], "h100", "float32")
    assert not big["fits"].iloc[0]  # 30.5 B float32 weights: 114 GiB
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        estimate(shape, [], "cpu", "int4")


def test_plan_command_plans_a_run_without_weights(capsys, monkeypatch):
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("the planner loaded a model"))
    assert (
        main(
            [
                "plan",
                "--model",
                "Qwen/Qwen3-8B",
                "--device",
                "h200",
                "decompose",
                "--tokens",
                "8192",
                "--sites",
                "attn,mlp",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "8.19 B parameters" in out and "bfloat16 weights" in out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert {"start-up:", "profile", "baseline", "edits", "total"} <= set(lines)
    assert "4 perplexity pass(es)" in lines["edits"]  # attn and mlp, each parallel and perpendicular
    assert main(["plan", "--model", "tiny:llama", "ppl", "--site", "attn", "--tokens", "-3"]) == 2
    assert "tokens" in capsys.readouterr().err


def test_the_command_s_own_model_flag_is_the_model_planned(capsys):
    """``tlgeo plan pdsf --model M`` plans M (the command line that runs it), not the default model."""
    assert main(["plan", "pdsf", "--model", "Qwen/Qwen3-8B"]) == 0
    assert capsys.readouterr().out.startswith("Qwen/Qwen3-8B:")
    assert main(["plan", "--model", "tiny:llama", "pdsf", "--model=Qwen/Qwen3-8B"]) == 2
    assert "two values of --model: tiny:llama before pdsf and Qwen/Qwen3-8B after it" in capsys.readouterr().err


def test_the_command_s_own_dtype_flag_is_the_dtype_planned(capsys):
    """``tlgeo plan ppl --dtype bfloat16`` plans bfloat16 weights (it planned float32 and ignored the flag)."""
    assert main(["plan", "--model", "tiny:llama", "ppl", "--site", "attn", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("bfloat16 weights")
    assert main(["plan", "--model", "tiny:llama", "ppl", "--site", "attn"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("float32 weights")
    assert (
        main(["plan", "--model", "tiny:llama", "--dtype", "float32", "ppl", "--site", "attn", "--dtype", "bfloat16"])
        == 2
    )
    assert "two values of --dtype: float32 before ppl and bfloat16 after it" in capsys.readouterr().err


def test_unknown_model_names_the_accepted_kinds(capsys):
    assert main(["plan", "--model", "nobody/none", "decompose"]) == 2
    err = capsys.readouterr().err
    assert "no shape for 'nobody/none'" in err and "Qwen/Qwen3-8B" in err


def test_devices_are_named():
    assert {"cpu", "h100", "h200"} <= set(DEVICES) and not DEVICES["cpu"].gpu
    json.dumps({k: vars(v) for k, v in DEVICES.items()})  # plain values


# every analysis command with a small run of it, as its own flags
PLANNED = {
    "decompose": ["--tokens", "2048", "--sites", "attn"],
    "profile": ["--tokens", "1024"],
    "ppl": ["--site", "attn", "--tokens", "1024"],
    "patching": ["--tasks", "induction", "--prompts", "8"],
    "circuit": ["--task", "ioi", "--prompts", "8", "--method", "eap"],
    "pdsf": ["--geometry-per-group", "2", "--single-pass-per-group", "1", "--per-group", "1", "--new-tokens", "8"],
    "tokenwise": ["--tokens", "512", "--seq-len", "64", "--patch-tokens", "16", "--patch-layer-count", "2"],
    "dirmag": [
        "--sentences",
        "16",
        "--seeds",
        "1",
        "--blimp-pairs",
        "2",
        "--repair-sentences",
        "4",
        "--entropy-sentences",
        "4",
        "--probe-sentences",
        "8",
    ],
    "geometries": ["--tokens", "512", "--layer-count", "2"],
    "compression": ["--methods", "wanda,awq", "--prompts", "4"],
    "sweeps": ["--tokens", "512", "--s-par-grid", "0,2"],
    "compare": ["--tokens", "512", "--zeroshot-limit", "5", "--ruler-samples", "1"],
    "heads": ["--texts", "2"],
    "mlp-carrier": ["--tokens", "512"],
    "closed-form": ["--tokens", "64"],
    "audit": ["--tokens", "512"],
}


def _steps(df):
    return df[~df["step"].str.startswith("start-up") & (df["step"] != "total")].set_index("step")


def test_every_analysis_command_is_planned_and_its_tiny_config_too():
    from tlgeo.report.plan import plannable
    from tlgeo.report.registry import load_analyses

    analyses = load_analyses()
    assert set(plannable()) == {a.command_name for a in analyses.values()} == set(PLANNED)
    shape = model_shape("tiny:llama")
    for a in analyses.values():  # the contract test's config of each: plannable on the tiny model it runs on
        est = estimate(shape, a.plan(shape, a.config(**a.tiny)))
        assert len(est) > 1 and (est["seconds"] > 0).all(), a.name


@pytest.mark.parametrize("command", list(PLANNED))
def test_plan_table_adds_up_each_command(command):
    from tlgeo.report.plan import plan_table

    df = plan_table(model_shape("Qwen/Qwen3-0.6B"), command, PLANNED[command], "h100")
    steps, total = _steps(df).drop("run"), df[df["step"] == "total"].iloc[0]
    assert len(steps) and total["forward_tokens"] == steps["forward_tokens"].sum() > 0
    assert total["seconds"] == pytest.approx(df[df["step"] != "total"]["seconds"].sum())
    assert total["peak_gib"] == steps["peak_gib"].max() and total["dtype"] == "bfloat16"
    gpu = steps["seconds"] - steps["cpu_seconds"]  # the forwards at the device's FLOP/s (x their hooks), host work
    assert gpu.to_numpy() == pytest.approx((steps["tflops"] * 1e12 / DEVICES["h100"].flops).to_numpy(), rel=1.5)
    assert df.attrs["start_seconds"] == pytest.approx(df[df["step"].str.startswith("start-up: ")]["seconds"].sum())


@pytest.mark.parametrize(
    "command, flag, step",
    [
        ("tokenwise", ("--tokens", "630", "1260"), "pool"),  # whole windows of 63 pool tokens
        ("tokenwise", ("--patch-tokens", "16", "32"), "patching"),
        ("pdsf", ("--conditions", "D", "D,S"), "generation: rotations"),
        ("geometries", ("--seeds", "1", "2"), "damage"),
        ("compression", ("--methods", "wanda", "wanda,awq"), "dense"),
        ("compression", ("--prompts", "6", "12"), "e2e"),
    ],
)
def test_doubling_a_budget_doubles_its_steps_tokens(command, flag, step):
    from tlgeo.report.plan import plan_table

    base = {
        "tokenwise": ["--seq-len", "64"],
        "pdsf": ["--per-group", "1", "--geometry-per-group", "0", "--single-pass", "none", "--new-tokens", "8"],
    }.get(command, [])
    name, one, two = flag
    a, b = (_steps(plan_table(CALIBRATION_MODEL, command, [*base, name, v])).loc[step] for v in (one, two))
    assert b["forward_tokens"] == 2 * a["forward_tokens"] > 0
    assert b["tflops"] == pytest.approx(2 * a["tflops"])


def test_dirmag_passes_grow_with_the_perturbations():
    from tlgeo.report.plan import plan_table

    def damage(seeds):
        df = plan_table(CALIBRATION_MODEL, "dirmag", ["--sentences", "32", "--seeds", str(seeds)])
        return int(_steps(df).loc["damage", "forward_tokens"])

    one, two, four = damage(1), damage(2), damage(4)  # one clean pass and kinds x deltas x seeds resumed ones
    assert four - two == 2 * (two - one) > 0 and one > two - one  # the clean pass besides
    blocks = _steps(plan_table(CALIBRATION_MODEL, "dirmag", ["--sentences", "32", "--layers", "20"]))
    assert (
        blocks.loc["damage", "tflops"]
        < _steps(plan_table(CALIBRATION_MODEL, "dirmag", ["--sentences", "32", "--layers", "5"])).loc[
            "damage", "tflops"
        ]
    )  # resumed later: fewer blocks run


def test_the_tokenwise_pool_keeps_every_state_of_every_token():
    from tlgeo.tokenwise.analysis import ANALYSIS, pool_size
    from tlgeo.tokenwise.config import TokenwiseConfig

    shape = CALIBRATION_MODEL
    for dtype, item in (("float32", 4), ("float16", 2)):
        cfg = TokenwiseConfig(tokens=1000, seq_len=64, pool_dtype=dtype)
        pool = next(w for w in ANALYSIS.plan(shape, cfg) if w.step == "pool")
        n_windows, n_tokens = pool_size(1000, 64)
        assert n_tokens == 16 * 63 >= 1000 and pool.tokens == n_windows * 64  # BOS read, not kept
        assert pool.host_bytes == n_tokens * (shape.n_layers + 1) * shape.d_model * item  # states 0..L
    cpu, gpu = (estimate(shape, [pool], device, "float32").iloc[0] for device in ("cpu", "h100"))
    assert cpu["host_gib"] == gpu["host_gib"] == pool.host_bytes / 2**30
    assert cpu["peak_gib"] - gpu["peak_gib"] == pytest.approx(cpu["host_gib"] + cpu["process_gib"])  # host: CPU peak


def test_pdsf_generation_counts_a_prefill_and_single_token_steps_per_prompt_and_condition():
    from tlgeo.pdsf.analysis import ANALYSIS
    from tlgeo.pdsf.config import PDSFConfig

    shape = CALIBRATION_MODEL

    def rows(new_tokens):
        cfg = PDSFConfig(
            geometry_per_group=0,
            single_pass="none",
            per_group=1,
            conditions=("D", "S", "random"),
            new_tokens=new_tokens,
        )
        return {w.step: w for w in ANALYSIS.plan(shape, cfg)}

    short, long = rows(5), rows(13)
    prompts = 12  # SpecB: 12 groups, one prompt each; one batch of 16
    assert long["generation: rotations"].tokens - short["generation: rotations"].tokens == 8 * 3 * prompts
    assert long["generation: unedited"].tokens - short["generation: unedited"].tokens == 8 * prompts
    assert short["generation: rotations"].tokens == 3 * short["generation: unedited"].tokens
    # the three conditions' rows share each generation call: 13 calls, not 3 x 13
    assert long["generation: rotations"].host == {"pdsf.generation_call": 13 * 30}  # calls x blocks
    assert long["generation: rotations"].batch == 3 * long["generation: unedited"].batch
    assert set(long) == {
        "generation: states",
        "generation: unedited",
        "generation: rotations",
        "generation: KL",
        "generation: F dynamics",
    }  # no geometry, no single pass


@pytest.mark.parametrize(
    "command, flags, error, says",
    [
        ("pdsf", ["--layers", "0,40"], ValueError, "layers [40] out of range: the states are 0..30"),
        ("pdsf", ["--new-tokens", "1"], ValueError, "new_tokens must be at least 2"),
        ("tokenwise", ["--layers", "30"], ValueError, "out of range: the pool has layer maps 0..29"),
        ("tokenwise", ["--seq-len", "1"], ValueError, "seq_len must be at least 2"),
        ("geometries", ["--layers", "30"], IndexError, "layer(s) 30 out of range"),
        ("geometries", ["--tokens", "32"], ValueError, "neighbours from other windows"),
        ("dirmag", ["--layers", "31"], IndexError, "layer(s) 31 out of range"),
        ("dirmag", ["--seeds", "0"], ValueError, "seeds"),
        ("compression", ["--methods", "wanda,wanda"], ValueError, "names a method twice"),
        ("tokenwise", ["--n-patch", "8"], ValueError, "not flags of tlgeo tokenwise: --n-patch"),  # --patch-tokens
    ],
)
def test_a_bad_config_fails_with_the_analysis_error(command, flags, error, says):
    from tlgeo.report.plan import plan_table

    with pytest.raises(error) as e:
        plan_table(CALIBRATION_MODEL, command, flags)
    assert says in str(e.value)


@pytest.mark.parametrize("command", ["pdsf", "tokenwise", "dirmag", "geometries", "compression"])
def test_plan_command_plans_each_analysis(command, capsys, monkeypatch):
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("the planner loaded a model"))
    assert main(["plan", "--model", "Qwen/Qwen3-0.6B", "--device", "h200", command, *PLANNED[command]]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert {"start-up:", "total"} <= set(lines) and len(lines) > 2 and "bfloat16 weights" in out
    assert "cpu_s" in out and "host_gib" in out
    # a command line that runs plans: its output and thread flags too; a flag it lacks does not
    assert main(["plan", "--model", "Qwen/Qwen3-0.6B", command, *PLANNED[command], "--out", "x", "--threads", "1"]) == 0
    capsys.readouterr()
    assert main(["plan", "--model", "Qwen/Qwen3-0.6B", command, "--no-such-flag", "x"]) == 2
    assert f"not flags of tlgeo {command}: --no-such-flag x" in capsys.readouterr().err


def test_compress_diag_plans_the_calibration_when_it_compresses():
    from tlgeo.compression.analysis import ANALYSIS
    from tlgeo.compression.config import CompressConfig, CompressionConfig

    shape = CALIBRATION_MODEL
    plain = {w.step: w for w in ANALYSIS.plan(shape, CompressionConfig(methods=("wanda", "awq")))}
    assert "compress" not in plain
    # each compressed model sits beside the dense one, in its dtype on its device: one more copy of the weights
    est = estimate(shape, list(plain.values()), "h100", "bfloat16").set_index("step")
    assert est.loc["load", "kept_gib"] == est.loc["load", "weights_gib"] == pytest.approx(shape.params * 2 / 2**30)
    assert est.loc["load", "host_gib"] == 0 and est.loc["local", "kept_gib"] > est.loc["load", "kept_gib"]
    cal = calibration()
    seconds = lambda w: cal.price(w.host)  # noqa: E731
    cfg = CompressionConfig(methods=("wanda", "awq"), compress=CompressConfig(methods=("wanda",), n_calib=32))
    got = {w.step: w for w in ANALYSIS.plan(shape, cfg)}
    fixed = shape.params * cal.value("compress.fixed")  # loading, saving: once per method
    per = {m: shape.params * 32 * 128 * cal.value(f"compress.{m}") for m in ("wanda", "awq")}
    assert seconds(got["compress"]) == pytest.approx(2 * fixed + per["wanda"] + per["awq"])
    half = CompressionConfig(methods=("wanda",), compress=CompressConfig(methods=("wanda",), n_calib=16))
    assert seconds({w.step: w for w in ANALYSIS.plan(shape, half)}["compress"]) == pytest.approx(
        fixed + per["wanda"] / 2
    )
    # a method without a row of its own is priced as its family: wanda_2_4 as wanda
    semi = CompressionConfig(methods=("wanda_2_4",), compress=CompressConfig(methods=("wanda",), n_calib=32))
    assert seconds({w.step: w for w in ANALYSIS.plan(shape, semi)}["compress"]) == pytest.approx(fixed + per["wanda"])


def test_the_calibration_model_is_smollm2_s_config():
    from tlgeo.models import cache_dir

    if not (cache_dir() / "smollm2-135m" / "config.json").is_file():
        pytest.skip("SmolLM2 not converted here")
    assert dataclasses.replace(model_shape("smollm2-135m"), name="") == dataclasses.replace(CALIBRATION_MODEL, name="")


def test_host_work_and_partial_forwards_in_estimate():
    shape = CALIBRATION_MODEL
    cal = calibration().replace("test.fit", 3.5)  # seconds per unit
    full, resumed, stopped, fits = (
        estimate(
            shape,
            [
                Work("full", 1000, 100),
                Work("resumed", 1000, 100, blocks=0.5),
                Work("stopped", 1000, 100, readout=0.01),
                Work("fits", 0, 1, host={"test.fit": 2}),
            ],
            "h100",
            "bfloat16",
            calib=cal,
        )
        .iloc[:4]
        .itertuples()
    )
    readout = 2 * shape.d_model * shape.vocab * 1000 / 1e12
    assert resumed.tflops == pytest.approx((full.tflops - readout) / 2 + readout)
    assert stopped.tflops == pytest.approx(full.tflops - 0.99 * readout)
    assert fits.seconds == fits.cpu_seconds == 7.0 and fits.tflops == 0 and fits.activations_gib == 0


def test_defaults_above_the_model_context_are_planned_cut_as_the_command_cuts_them():
    from tlgeo.report.plan import plan_table

    short = dataclasses.replace(CALIBRATION_MODEL, n_ctx=128)  # the trained LayerNorm / RMSNorm pair's context
    rows = plan_table(short, "decompose").set_index("step")
    assert rows.loc["profile", "window"] == rows.loc["baseline", "window"] == 128  # the defaults: 256 and 512
    assert [n.split(":")[0] for n in rows.attrs["notes"]] == ["--context", "--profile-seq-len"]
    whole = plan_table(CALIBRATION_MODEL, "decompose").set_index("step")
    assert whole.loc["baseline", "window"] == 512 and whole.attrs["notes"] == []
    assert rows.loc["total", "peak_gib"] < whole.loc["total", "peak_gib"]  # 4 windows of 128 tokens, not 512


def test_the_atlas_is_planned_step_by_step_from_its_budgets():
    from tlgeo.report.plan import plan_table
    from tlgeo.report.registry import load_steps

    shape = model_shape("smollm2-135m")
    df = plan_table(shape, "atlas", [])
    body = df[~df["step"].str.startswith("start-up: ") & ~df["step"].isin(["total", "report"])]
    assert {s.split(": ")[0] for s in body["step"]} == set(load_steps())  # every step, each its analysis's plan
    assert (
        body["step"].str.endswith(": run").sum() == len(load_steps())  # each step's fixed work, then the report
        and df["step"].iloc[-2] == "report"
    )
    total = df.set_index("step").loc["total"]
    assert total["seconds"] == pytest.approx(df[df["step"] != "total"]["seconds"].sum())
    # a budget moves its step's plan and no other: twice the sweep tokens, twice the sweep's forward tokens
    more = plan_table(shape, "atlas", ["--decomposition-sweep-tokens", "1024", "--steps", "sweeps,heads"])
    sweeps = lambda d: d[d["step"].str.startswith("sweeps: ")]["forward_tokens"].sum()  # noqa: E731
    assert set(more["step"].str.split(": ").str[0]) - {"start-up", "total", "report"} == {"sweeps", "heads"}
    assert sweeps(more) == pytest.approx(2 * sweeps(df), rel=0.02)
    with pytest.raises(ValueError, match="unknown step"):
        plan_table(shape, "atlas", ["--steps", "nope"])


def _table(tmp_path, rows):
    """A calibration table of ``rows`` ``(kind, dtype, threads, value)`` (device cpu unless a fifth item)."""
    from tlgeo.planner import CALIBRATION_COLUMNS, Calibration

    path = tmp_path / "calibration.csv"
    path.write_text(
        ",".join(CALIBRATION_COLUMNS)
        + "\n"
        + "".join(
            f"{r[4] if len(r) > 4 else 'cpu'},{r[0]},{r[1]},{r[2]},{r[3]},u,test machine,today,test\n" for r in rows
        )
    )
    return Calibration.read(path)


def test_the_calibration_table_prices_every_time(tmp_path):
    """Every second of a plan is a row of the table times an amount: doubling a row's price doubles exactly its
    part of the plan (the forwards' FLOP/s halved: their time twice), and the table's machine is printed."""
    from tlgeo.report.plan import plan_table

    cal = calibration()
    flags = ["--tokens", "1024", "--threads", "1"]
    base = plan_table("smollm2-135m", "profile", flags, calib=cal).set_index("step")
    slow = cal.replace(
        "forward.flops", cal.value("forward.flops", "float32", 1) / 2, dtype="float32", threads=1, unit="FLOP/s"
    )
    hooks = cal.replace("profile.site", 2 * cal.value("profile.site", threads=1), threads=1)
    load = cal.replace("start.load.embedded.gib", 2 * cal.value("start.load.embedded.gib", threads=1), threads=1)
    shape, prof = model_shape("smollm2-135m"), base.loc["profile"]
    flops = prof["tflops"] * 1e12 / cal.value("forward.flops", "float32", 1)
    forwards = -(-1024 // (prof["window"] * prof["batch"]))  # batches of windows
    blocks = forwards * shape.n_layers * cal.value("forward.block", threads=1)
    site = cal.value("profile.site", threads=1)
    assert prof["seconds"] == pytest.approx(flops * (1 + 5 * site) + blocks)  # the default five sites

    def got(c, step):
        return plan_table("smollm2-135m", "profile", flags, calib=c).set_index("step").loc[step, "seconds"]

    assert got(slow, "profile") == pytest.approx(prof["seconds"] + flops * (1 + 5 * site))
    assert got(hooks, "profile") == pytest.approx(prof["seconds"] + flops * 5 * site)
    gib = shape.params * 4 / 2**30
    assert got(load, "start-up: load") == pytest.approx(
        base.loc["start-up: load", "seconds"] + gib * cal.value("start.load.embedded.gib", threads=1)
    )
    assert got(cal, "start-up: imports") == cal.value("start.imports", threads=1) > 0


def test_the_start_up_is_priced_by_the_model_s_format_and_size(tmp_path, capsys):
    """tiny:<kind> is built in memory, an embedded model is read from the cache and verified, a directory read:
    each format's fixed load and per-GiB rows; ``tlgeo plan`` says which part of its total is the start-up."""
    from tlgeo.planner import model_format, start_seconds

    cal = _table(
        tmp_path,
        [
            ("start.imports", "any", 1, 4.0),
            ("start.load.tiny", "any", 1, 0.5),
            ("start.load.embedded", "any", 1, 1.0),
            ("start.load.embedded.gib", "any", 1, 10.0),
            ("start.load.directory", "any", 1, 2.0),
            ("start.load.directory.gib", "any", 1, 1.0),
        ],
    )
    shape = model_shape("smollm2-135m")
    gib = shape.params * 4 / 2**30
    assert [model_format(n) for n in ("tiny:llama", "smollm2-135m", "Qwen/Qwen3-8B")] == [
        "tiny",
        "embedded",
        "directory",
    ]
    assert start_seconds(shape, "float32", "embedded", 1, cal) == {"imports": 4.0, "load": pytest.approx(1 + 10 * gib)}
    assert start_seconds(shape, "bfloat16", "directory", 1, cal)["load"] == pytest.approx(2 + gib / 2)
    assert start_seconds(model_shape("tiny:llama"), "float32", "tiny", 1, cal)["load"] == 0.5
    assert main(["plan", "--model", "smollm2-135m", "ppl", "--site", "attn", "--tokens", "512"]) == 0
    out = capsys.readouterr().out
    start = sum(start_seconds(shape, "float32", "embedded").values())  # the committed table's
    assert f"start-up: {start:.3g} s of the total" in out and "start-up: imports" in out and "start-up: load" in out
    assert "calibration: " in out


def test_threads_and_dtypes_are_the_table_s_rows_and_the_plan_says_which(tmp_path):
    """A plan at a thread count the table has uses its rows; at another, the nearest, and says so; a half dtype
    its own FLOP/s (the CPU's matrix units), with a note, and ``cpu-avx2`` the rows measured without them."""
    from tlgeo.report.plan import plan_table

    rows = [
        ("forward.flops", "float32", 1, 1e10),
        ("forward.flops", "float32", 2, 2e10),
        ("forward.flops", "bfloat16", 1, 4e10),
        ("forward.flops", "float32", 1, 1e10, "cpu-avx2"),
        ("forward.flops", "bfloat16", 1, 1e9, "cpu-avx2"),
        ("forward.block", "any", 1, 0.0),
        ("start.imports", "any", 1, 1.0),
        ("start.load.embedded", "any", 1, 0.0),
        ("start.load.embedded.gib", "any", 1, 0.0),
        ("profile.site", "any", 1, 0.0),
        ("run.any", "any", 1, 0.0),
    ]
    cal = _table(tmp_path, rows)

    def forwards(flags, device="cpu"):
        df = plan_table("smollm2-135m", "profile", ["--tokens", "1024", *flags], device=device, calib=cal)
        return df.set_index("step").loc["profile", "seconds"], df.attrs["notes"]

    one, notes1 = forwards(["--threads", "1"])
    two, notes2 = forwards(["--threads", "2"])
    four, notes4 = forwards(["--threads", "4"])
    assert one == pytest.approx(2 * two) and four == two and not notes1 and not notes2
    assert notes4 == ["--threads 4: planned at the calibration's 2 thread(s) (it holds [1, 2])"]
    half, notes = forwards(["--threads", "1", "--dtype", "bfloat16"])
    assert half == pytest.approx(one / 4)
    assert notes[0] == "bfloat16 weights on cpu: the forwards take 0.25x their time in float32"
    assert "--device cpu-avx2 plans that" in notes[1]
    avx2, notes = forwards(["--threads", "1", "--dtype", "bfloat16"], "cpu-avx2")
    assert avx2 == pytest.approx(10 * one) and "10x their time in float32" in notes[0]
    with pytest.raises(KeyError, match="no 'forward.flops' \\(float16, cpu\\)"):
        forwards(["--threads", "1", "--dtype", "float16"])


def test_no_analysis_module_holds_a_timing_constant():
    """The analyses' plans give the shape of their work; every price is the calibration table's: no analysis module
    reads a FLOP/s or seconds constant, and every kind their plans name at their tiny configs is in the table."""
    import re
    from pathlib import Path

    from tlgeo.report.registry import load_analyses

    root = Path(__file__).resolve().parents[1] / "tlgeo"
    for path in root.rglob("*.py"):
        if path.name == "planner.py":
            continue
        text = path.read_text()
        assert not re.search(r"CPU_FLOPS|_SECONDS\b|_SECONDS_PER|OVERHEAD\b|LOAD_GIB_PER_S|cpu_seconds=", text), path
    cal, shape = calibration(), model_shape("tiny:llama")
    for a in load_analyses().values():
        for w in a.plan(shape, a.config(**a.tiny)):
            for kind in [*w.hooks, *w.host]:
                cal.row(kind)  # raises if the table has no row for it


def test_plan_takes_the_command_s_flags_before_the_analysis_name(capsys):
    """``tlgeo plan --threads 1 --model smollm2-135m decompose`` reads as ``tlgeo plan --model smollm2-135m
    decompose --threads 1`` (it failed with "invalid choice: '1'")."""
    from tlgeo.report.plan import plan_argv

    assert plan_argv(["--threads", "1", "--model", "m", "decompose", "--tokens", "8"]) == [
        "--model",
        "m",
        "decompose",
        "--threads",
        "1",
        "--tokens",
        "8",
    ]
    assert plan_argv(["--device=h100", "--patching-prompts", "8", "atlas"]) == [
        "--device=h100",
        "atlas",
        "--patching-prompts",
        "8",
    ]
    assert main(["plan", "--threads", "1", "--model", "smollm2-135m", "decompose"]) == 0
    before = capsys.readouterr().out
    assert main(["plan", "--model", "smollm2-135m", "decompose", "--threads", "1"]) == 0
    assert capsys.readouterr().out == before and "profile" in before
    assert main(["plan", "--tokens", "2048", "profile", "--threads", "1"]) == 0
    assert "2.05e+03" in capsys.readouterr().out  # the profile's 2048 forward tokens
    with pytest.raises(SystemExit):
        main(["plan", "--threads", "1"])  # no analysis named: argparse's error
    assert "analysis" in capsys.readouterr().err


def test_the_cli_page_prints_the_committed_plan_check():
    """docs/cli.md's table of the planner against measured runs is the one scripts/bench_plan.py prints from the
    committed results/plan-smollm2-135m (a rerun that changes it fails here until the page is regenerated)."""
    import re
    from pathlib import Path

    import pandas as pd

    from .scripts import load_script

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "cli.md").read_text()
    block = re.search(r"<!--\s*table:\s*plan\s*-->\n(.*?)\n<!--\s*/table\s*-->", page, re.S)
    assert block, "docs/cli.md has no <!-- table: plan --> block"
    table = pd.read_csv(root / "results" / "plan-smollm2-135m" / "plan_vs_measured.csv")
    assert block.group(1).strip() == load_script("bench_plan").markdown_table(table).strip()


def test_the_calibration_solves_each_kind_from_its_commands_measured_work(monkeypatch):
    """scripts/bench_plan.py --calibrate prices a kind from commands' measured work less the plan without it: given
    runs that took what known prices would give, least squares finds those prices (the tokenwise group: six kinds
    from six commands), and the table it writes reads back the same."""
    from .scripts import load_script

    bench, cal = load_script("bench_plan"), calibration()
    kinds, runs = next((k, r) for k, r in bench.SOLVE if "tokenwise.knn" in k)
    truth = cal
    for i, k in enumerate(kinds):
        truth = truth.replace(k, (1.5 + i) * cal.value(k, threads=1), threads=1)
    measured = {" ".join(f): bench._work_seconds(truth, m, c, f, 1) for m, c, f in runs}
    monkeypatch.setattr(
        bench,
        "_timed_command",
        lambda m, c, f, t, out=None: {
            "work_s": measured[" ".join(f)],
            "imports_s": 1.0,
            "load_s": 1.0,
            "seconds": 3.0,
            "wall_s": 3.0,
        },
    )
    rows, seen = bench._solve_rows(cal, kinds, runs, 1, "test machine")
    assert [r["kind"] for r in rows] == kinds and len(seen) == len(runs)
    for r in rows:
        assert r["value"] == pytest.approx(truth.value(r["kind"], threads=1), rel=1e-6), r["kind"]
        assert r["machine"] == "test machine" and r["threads"] == 1


def test_the_readme_quotes_what_the_planner_prints():
    """The README's planned times are the planner's on the committed calibration table, to three significant
    digits (a new calibration changes them: this fails until the README follows)."""
    import re
    from pathlib import Path

    from tlgeo.report.plan import plan_table

    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    m = re.search(
        r"plans ([\d,.]+) s on SmolLM2 .*?\(`tlgeo plan (patching [^`]*)`\), ([\d,.]+) s of it the exact "
        r"sweep .*? and ([\d,.]+) s the start-up .*?the attribution step alone plans ([\d,.]+) s",
        text,
    )
    assert m, "the README's plan sentence changed: update this test"
    total, flags, exact, start, attribution = m.groups()
    df = plan_table("smollm2-135m", "patching", flags.split()[1:])
    rows = df.set_index("step")["seconds"]
    three = lambda v: float(f"{v:.3g}")  # noqa: E731
    planned = [rows["total"], rows["ioi: exact"], df.attrs["start_seconds"], rows["ioi: attribution"]]
    assert [float(q.replace(",", "")) for q in (total, exact, start, attribution)] == [three(v) for v in planned]


def test_a_kind_the_rest_of_the_plan_already_exceeds_is_priced_at_its_floor(monkeypatch):
    """Noise can make a command's measured work less than its plan without the kind solved for: a price in seconds is
    then 0 (no work takes negative seconds), a hook's share at least FLOOR_SHARE, and the row says so."""
    from .scripts import load_script

    bench, cal = load_script("bench_plan"), calibration()
    monkeypatch.setattr(
        bench,
        "_timed_command",
        lambda m, c, f, t, out=None: {"work_s": 0.0, "imports_s": 1.0, "load_s": 1.0, "seconds": 2.0, "wall_s": 2.0},
    )
    for kinds, runs in bench.SOLVE[1:3]:  # edit, dirmag.sweep: shares of a bare forward; then seconds
        (row,), _ = bench._solve_rows(cal, kinds, runs, 1, "m")
        assert row["value"] == bench.FLOOR_SHARE and "below" in row["how"]
    kinds, runs = next((k, r) for k, r in bench.SOLVE if k == ["dirmag.probe_fit"])
    (row,), _ = bench._solve_rows(cal, kinds, runs, 1, "m")
    assert row["value"] == 0.0 and "the rest of the plan exceeds the measurement" in row["how"]
