"""One command per seed paper, on the paper's own models, for an online user with GPUs.

    python scripts/paper_recipes.py                    # each recipe: the planner's estimate, then its command
    python scripts/paper_recipes.py decomposition --gpus 8 --run   # run one (torchrun over 8 GPUs)

Each recipe is a tlgeo command at the paper's budget (``tlgeo <command> --help`` explains every
flag); ``--run`` executes it, under ``torchrun --standalone --nproc_per_node=<gpus>`` with
``--gpus`` > 1. The estimate is ``tlgeo plan`` (every recipe's command is planned). Not run here:
this machine has no network (the models come from the hub) and no GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# name -> (paper, models, tlgeo argv without --model / --out)
RECIPES: dict[str, tuple[str, tuple[str, ...], list[str]]] = {
    "decomposition": (
        "000 directional decomposition: parallel ratios and removal perplexities, by scale",
        ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B"),
        [
            "decompose",
            "--tokens",
            "0",
            "--context",
            "2048",
            "--profile-tokens",
            "8192",
            "--profile-seq-len",
            "1024",
            "--dtype",
            "bfloat16",
        ],
    ),
    "pdsf": (
        "001 prediction-anchored subspaces: SpecA geometry, single-pass edits, SpecB rotations",
        ("google/gemma-2-9b",),
        [
            "pdsf",
            "--prompts",
            "specA",
            "--generate",
            "specB",
            "--new-tokens",
            "64",
            "--conditions",
            "D,S,F_top,random",
            "--dtype",
            "bfloat16",
        ],
    ),
    "tokenwise": (
        "002 tokenwise layer maps: local fits over 20,000 tokens, patching KL",
        ("meta-llama/Llama-3.2-3B",),
        ["tokenwise", "--tokens", "20000", "--k", "32", "--patch-tokens", "256", "--dtype", "bfloat16"],
    ),
    "dirmag": (
        "003 direction vs magnitude: LayerNorm (Pythia) against RMSNorm (TinyLlama)",
        ("EleutherAI/pythia-410m", "TinyLlama/TinyLlama-1.1B"),
        ["dirmag", "--seeds", "5", "--blimp-pairs", "34", "--repair-sentences", "100", "--probe-sentences", "500"],
    ),
}


def argv_of(name: str, model: str) -> list[str]:
    """The ``tlgeo`` argv of a recipe on one of its models (output under ``runs/``)."""
    cmd = RECIPES[name][2]
    return [cmd[0], "--model", model, *cmd[1:], "--out", f"runs/{name}-{model.replace('/', '_')}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="recipes (default: all): " + ", ".join(RECIPES))
    p.add_argument("--device", default="h100", help="the planner's device (cpu, a100, h100, h200)")
    p.add_argument("--gpus", type=int, default=1, help="processes (one GPU each) for --run")
    p.add_argument("--run", action="store_true", help="run the recipes, not only print them")
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in RECIPES]
    if unknown:
        p.error(f"unknown recipe(s) {unknown}; recipes: {', '.join(RECIPES)}")
    from tlgeo.report.plan import plannable, plan_table

    for name in a.names or RECIPES:
        paper, models, _ = RECIPES[name]
        print(f"\n## {name}: {paper}")
        for model in models:
            argv_ = argv_of(name, model)
            if argv_[0] in plannable():
                dtype = argv_[argv_.index("--dtype") + 1] if "--dtype" in argv_ else None
                df = plan_table(model, argv_[0], _config_flags(argv_[3:]), a.device, dtype)
                total = df[df["step"] == "total"].iloc[0]
                print(
                    f"{model}: ~{total['seconds'] / 60:.0f} min on one {a.device}, peak "
                    f"{total['peak_gib']:.0f} GiB ({int(total['forward_tokens']):,} forward tokens; tlgeo plan)"
                )
            launcher = (
                [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.gpus}"]
                if a.gpus > 1
                else [sys.executable]
            )
            cmd = [*launcher, "-m", "tlgeo", *argv_]
            print("  " + " ".join(["python", *cmd[1:]] if a.gpus == 1 else ["torchrun", *cmd[3:]]))
            if a.run:
                subprocess.run(cmd, check=True, cwd=REPO)
    return 0


def _config_flags(flags: list[str]) -> list[str]:
    """The flags of a recipe without those of the model's placement (``--dtype``, ``--out``)."""
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
            continue
        if f in ("--dtype", "--out", "--device"):
            skip = True
            continue
        out.append(f)
    return out


if __name__ == "__main__":
    sys.exit(main())
