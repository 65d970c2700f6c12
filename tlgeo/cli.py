"""Command line: ``tlgeo run | atlas | profile | ppl | compress-diag | train | sites | models``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _layers(s: str | None):
    if s in (None, "", "all"):
        return None
    out: list[int] = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        else:
            out.append(int(part))
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="embedded name, tiny:<kind>, local dir or hub name")
    p.add_argument("--corpus", default="wikitext2", help="named corpus (see tlgeo.data.CORPORA), a text file, or hf:<dataset>")
    p.add_argument("--tokens", type=int, default=2048, help="text tokens to use (0 = all)")
    p.add_argument("--out", default=None, help="output directory (default results/<model>)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")


def _edit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", required=True, help="attn, mlp, block, value_full, value_excl_self, diag")
    p.add_argument("--s-par", type=float, default=1.0)
    p.add_argument("--s-perp", type=float, default=1.0)
    p.add_argument("--layers", default=None, help="e.g. 3,5,10-12 (default all)")
    p.add_argument("--skip-first", type=int, default=0, help="leave the first n blocks unedited")
    p.add_argument("--heads", default=None, help="query heads, e.g. 0,2 (per-head sites only)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlgeo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd")

    run = sub.add_parser("run", help="main job: parallel-ratio profile + PPL under component removal at every site")
    _common(run)
    run.add_argument("--context", type=int, default=512)
    run.add_argument("--profile-tokens", type=int, default=1024)
    run.add_argument("--skip-first", type=int, default=1, help="leave the first n blocks unedited (reference code: 1)")

    prof = sub.add_parser("profile", help="parallel ratios per layer, site and token")
    _common(prof)
    prof.add_argument("--seq-len", type=int, default=256)
    prof.add_argument("--sites", default="attn,mlp,block,value_full,value_excl_self")
    prof.add_argument("--per-token", action="store_true", help="also write every token's row (csv.gz)")

    ppl = sub.add_parser("ppl", help="perplexity unedited and under one edit")
    _common(ppl)
    _edit_args(ppl)
    ppl.add_argument("--context", type=int, default=512)

    atlas = sub.add_parser("atlas", help="every registered analysis step on one model, as an HTML report + CSVs")
    atlas.add_argument("--model", default="smollm2-135m")
    atlas.add_argument("--corpus", default="wikitext2")
    atlas.add_argument("--out", default=None, help="output directory (default results/atlas-<model>)")
    atlas.add_argument("--threads", type=int, default=None)
    atlas.add_argument("--steps", default=None, help="comma-separated subset of: " + ",".join(_atlas_steps()))
    atlas.add_argument("--seed", type=int, default=0)
    _budget_flags(atlas)
    atlas.add_argument("--full-grids", action="store_true", help="the paper's full s_par / s_perp grids")

    cd = sub.add_parser("compress-diag", help="perpendicular vs parallel error of compressed models (CSV + figure)")
    cd.add_argument("--model", default="smollm2-135m", help="the dense model")
    cd.add_argument("--methods", default="awq,wanda,wanda_4_8,wanda_2_4", help="methods under --root (comma list)")
    cd.add_argument("--root", default=None, help="folder with one compressed model dir per method "
                    "(default $TLGEO_CACHE/compressed/<model>, as written by scripts/compress.py)")
    cd.add_argument("--corpus", default="wikitext2", help="held-out text for the prompts")
    cd.add_argument("--prompts", type=int, default=12, help="number of prompts (windows of the corpus)")
    cd.add_argument("--seq-len", type=int, default=128)
    cd.add_argument("--modes", default="local,e2e", help="local (counterfactual), e2e (own hidden states)")
    cd.add_argument("--ppl", default=None, help="ppl.csv of scripts/compress.py (default <out>/ppl.csv if present)")
    cd.add_argument("--out", default=None, help="output directory (default results/compression/<model>)")
    cd.add_argument("--threads", type=int, default=None)

    from .train.cli import add_train_args  # tlgeo train: pretraining with parallel suppression
    add_train_args(sub.add_parser("train", help="pretrain a model from scratch with parallel suppression"))
    sub.add_parser("sites", help="list the sites")
    sub.add_parser("models", help="list the embedded models")
    return parser


def _setup(args):
    import torch

    from .data import load_text
    from .models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    text = load_text(args.corpus)  # fail on a bad corpus before the model loads
    model = load_model(args.model)
    out = Path(args.out or Path("results") / args.model.replace("/", "_").replace(":", "-"))
    out.mkdir(parents=True, exist_ok=True)
    return model, text, out, (args.tokens or None)


def _profile(model, text, out: Path, tokens, seq_len, sites, per_token: bool):
    from .decomposition.observe import parallel_profile, summarize_profile

    df = parallel_profile(model, text, sites=sites, seq_len=seq_len, max_tokens=tokens, progress=True)
    summary = summarize_profile(df)
    summary.to_csv(out / "profile_summary.csv", index=False)
    if per_token:
        df.to_csv(out / "profile_tokens.csv.gz", index=False)
    return summary


def _print_profile(summary) -> None:
    table = summary.pivot(index="layer", columns="site", values="parallel_ratio_median")
    print("\nmedian parallel ratio |alpha| ||r|| / ||y_perp|| per layer (position 0 left out):")
    print(table.round(3).to_string())


def cmd_run(args) -> int:
    from .decomposition.compare import compare_edits, removal_edits
    from .hooks.sites import DECOMPOSITION_SITES, SITES

    t0 = time.time()
    model, text, out, tokens = _setup(args)
    summary = _profile(model, text, out, args.profile_tokens, 256, DECOMPOSITION_SITES, False)
    _print_profile(summary)
    df = compare_edits(
        model, text, removal_edits(SITES, skip_first=args.skip_first), context=args.context,
        max_tokens=tokens, log_path=out / "edits.jsonl", progress=True,
    )
    df.to_csv(out / "edits.csv", index=False)
    cols = ["site", "s_par", "s_perp", "ppl", "delta_ppl", "word_ppl", "n_tokens"]
    print(f"\nperplexity on {args.corpus} ({int(df['n_tokens'].iloc[0])} tokens, context {args.context}), "
          f"edits in blocks {args.skip_first}..{model.cfg.n_layers - 1}:")
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nwrote {out}/profile_summary.csv, {out}/edits.csv ({time.time() - t0:.0f} s)")
    return 0


def cmd_profile(args) -> int:
    model, text, out, tokens = _setup(args)
    summary = _profile(model, text, out, tokens, args.seq_len, args.sites.split(","), args.per_token)
    _print_profile(summary)
    print(f"\nwrote {out}/profile_summary.csv")
    return 0


def cmd_ppl(args) -> int:
    from .decomposition.compare import compare_edits
    from .hooks.edits import Edit

    heads = _layers(args.heads)
    e = Edit(args.site, args.s_par, args.s_perp, _layers(args.layers), args.skip_first, heads)
    model, text, out, tokens = _setup(args)
    e.hooks(model)  # validate layers/heads before any long work
    df = compare_edits(model, text, [e], context=args.context, max_tokens=tokens, progress=True)
    result = df.to_dict(orient="records")
    (out / "ppl.json").write_text(json.dumps(result, indent=2, default=str))
    for r in result:
        print(f"{r['site']:>16} s_par={r['s_par']} s_perp={r['s_perp']}: ppl {r['ppl']:.3f} (delta {r['delta_ppl']:+.3f})")
    print(f"wrote {out}/ppl.json")
    return 0


def _atlas_steps():
    from .report.registry import load_steps

    return tuple(load_steps())


def _items(kind: type):
    """argparse type: a comma-separated list of ``kind`` as a tuple (empty entries dropped)."""
    def parse(v: str) -> tuple:
        return tuple(kind(x) for x in v.split(",") if x)

    parse.__name__ = f"comma-separated {kind.__name__} list"
    return parse


def _budget_flags(p: argparse.ArgumentParser) -> None:
    """One flag per budget field of every registered analysis family (``--<field-name>``)."""
    from .pipeline import budget_fields
    from .report.registry import load_steps

    load_steps()
    for name, (family, f) in budget_fields().items():
        meta, default = f.metadata, f.default
        kind = meta.get("item")
        if isinstance(default, tuple) or kind is not None:
            kind, metavar = _items(kind or type(default[0])), "LIST"
            shown = ",".join(map(str, default)) if default is not None else "see help"
        else:
            kind, shown = type(default), default
            metavar = {int: "N", float: "X"}.get(kind, "NAME")
        p.add_argument(meta.get("flag", "--" + name.replace("_", "-")), dest=f"budget__{name}", type=kind,
                       default=None, choices=meta.get("choices"), metavar=None if "choices" in meta else metavar,
                       help=f"{meta.get('help', '')} [{family}; default {shown}]")


def cmd_atlas(args) -> int:
    import torch

    from .report.atlas import AtlasConfig, run_atlas

    if args.threads:
        torch.set_num_threads(args.threads)
    budgets = {k.removeprefix("budget__"): v for k, v in vars(args).items()
               if k.startswith("budget__") and v is not None}
    if args.full_grids:
        from .decomposition.sweeps import S_PAR_GRID, S_PERP_GRID

        budgets.update(s_par_grid=S_PAR_GRID, s_perp_grid=S_PERP_GRID)
    steps = tuple(x for x in args.steps.split(",") if x) if args.steps else None
    cfg = AtlasConfig(model=args.model, corpus=args.corpus, out=args.out, steps=steps, seed=args.seed,
                      budgets=budgets)
    path = run_atlas(cfg)
    print(f"wrote {path}")
    return 0


def cmd_sites(args) -> int:
    from .hooks.sites import SITES

    for s in SITES.values():
        print(f"{s.name:>16}  edits blocks.L.{s.target:<18} {s.description}")
    return 0


def cmd_models(args) -> int:
    from .models import EMBEDDED_MODELS, TINY_KINDS

    for m in EMBEDDED_MODELS.values():
        print(f"{m.name:>14}  from PyPI package {m.pip_name}")
    print(f"{'tiny:<kind>':>14}  random test models: {', '.join(TINY_KINDS)}")
    return 0


def cmd_compress_diag(args) -> int:
    import pandas as pd
    import torch

    from .compression.experiment import run_diagnosis
    from .compression.llmc import compressed_dir
    from .data import load_text
    from .models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    key = Path(args.model).name if Path(args.model).expanduser().is_dir() else args.model.replace(":", "-")
    root = Path(args.root) if args.root else compressed_dir(key, "x").parent
    methods = [m for m in args.methods.split(",") if m]
    if not methods:
        raise ValueError("no methods given")
    compressed = {m: root / m for m in methods}
    missing = [str(p) for p in compressed.values() if not (p / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(f"compressed model directory missing: {', '.join(missing)} "
                                "(create them with scripts/compress.py)")
    text = load_text(args.corpus)
    out = Path(args.out or Path("results") / "compression" / key)
    ppl_path = Path(args.ppl) if args.ppl else out / "ppl.csv"
    ppl = pd.read_csv(ppl_path) if ppl_path.is_file() else None
    base = load_model(args.model)
    frames = run_diagnosis(base, compressed, text, out, n_prompts=args.prompts, seq_len=args.seq_len,
                           modes=[m for m in args.modes.split(",") if m], ppl=ppl)
    t = frames["table12"]
    t = t[(t["ref"] == "delta") & (t["tokens"] == "last")]
    cols = ["mode", "site", "method", "r_e_perp", "rho_e_perp", "rho_e_par", "share_perp", "share_par", "mean_e_perp"]
    print(t[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}/diag_layers.csv, table12.csv, figure6_*.png")
    return 0


def cmd_train(args) -> int:
    from .train.cli import run

    return run(args)


COMMANDS = {
    "run": cmd_run, "atlas": cmd_atlas, "profile": cmd_profile, "ppl": cmd_ppl,
    "compress-diag": cmd_compress_diag, "train": cmd_train, "sites": cmd_sites, "models": cmd_models,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.cmd](args)
    except (ValueError, KeyError, IndexError, FileNotFoundError) as e:
        print(f"tlgeo {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
