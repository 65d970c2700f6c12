"""``tlgeo compress`` and ``tlgeo compression``: their flags are the fields of
:class:`~tlgeo.compression.config.CompressConfig` and :class:`~tlgeo.compression.config.CompressionConfig`.

Both write to ``runs/compression/<model>`` by default (never the committed ``results/``), so
``compression`` finds the ``ppl.csv`` that ``compress --ppl`` wrote."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..errors import InputError
from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, config_from_args, output_dir, print_written
from ..storage import write_csv
from .config import CompressConfig, CompressionConfig

__all__ = ["COMMANDS"]

COMPRESSION_HELP = "perpendicular vs parallel error of compressed models (CSV + figure)"
COMPRESSION_DESCRIPTION = (
    "Run the dense model once per batch with hooks that keep three tensors per block, then each compressed block "
    "on the dense hidden state (local counterfactual) and each compressed model on its own states (e2e); split "
    "e = Delta_comp - Delta_base relative to Delta_base (and to z) per prompt, layer and site; Table 12 statistics "
    "across layers, Figure 6 per mode. Compressed models: one folder per method under --root, as tlgeo compress "
    "writes them. Resumes per method."
)
COMPRESS_HELP = "compress a model with llmcompressor, then evaluate perplexity / zero-shot accuracy"
COMPRESS_DESCRIPTION = (
    "Compress with llmcompressor into $TLGEO_CACHE/compressed/<model>/<method> (never the repository), then "
    "optionally evaluate perplexity and zero-shot accuracy of the base and every method. Method names "
    "(tlgeo.compression.methods): a family (awq, rtn, wanda, sgpt, owl, perpalloc) with options _perp, "
    "_l<lambda>, _w<bits>g<group>, _s<percent>, _<N>_<M>; perpalloc reads its per-layer sensitivity from "
    "--sensitivity-from (a diag_layers.csv of tlgeo compression). A method already compressed with the same "
    "settings is reused, one with other settings stops the run (--force recompresses). Calibration: --n-calib "
    "windows of --calib-seq-len tokens of --calib-corpus (the WikiText-2 validation split, disjoint from the test "
    "text that perplexity reads). Evaluations are logged in --out and not recomputed. On a GPU machine pass "
    "--device cuda (or auto: llmcompressor's sequential pipeline onloads one decoder layer at a time)."
)
OUT = "runs/compression/<model>"


def _out(args: argparse.Namespace) -> Path:
    from .compress import base_key

    return output_dir(args, "compression/" + base_key(args.model))  # checked writable before any work


# ---------------------------------------------------------------------------
# tlgeo compression
# ---------------------------------------------------------------------------


def add_compression_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, CompressionConfig)
    p.add_argument("--ppl", default=None, help="ppl.csv of tlgeo compress (default: <out>/ppl.csv if present)")
    add_out_arg(p, OUT)


def run_compression(args: argparse.Namespace) -> int:
    from ..data import load_text
    from ..runner.distributed import run_command
    from .analysis import ANALYSIS, CompressionResult
    from .compress import base_key, compressed_root
    from .summary import ppl_prediction
    from .plots import save_figures
    from .paper import paper_line

    ppl: list = []  # the ppl.csv of tlgeo compress, once read

    def check(cfg: CompressionConfig) -> CompressionConfig:
        """The compressed models' folders and the corpus, before the model loads; ``cfg`` with its root found."""
        root = compressed_root(args.model, cfg.root)
        missing = [str(root / m) for m in cfg.methods if not (root / m / "config.json").is_file()]
        if missing:
            raise FileNotFoundError(
                f"compressed model directory missing: {', '.join(missing)} (create them with tlgeo compress)"
            )
        load_text(cfg.corpus)
        if args.ppl:  # given: it must be there and readable before the model loads
            ppl.append(read_ppl_csv(Path(args.ppl)))
        return dataclasses.replace(cfg, root=str(root))

    def default_ppl(model, cfg, out: Path) -> None:
        if not args.ppl and (out / "ppl.csv").is_file():  # the one tlgeo compress wrote, when there is one
            ppl.append(read_ppl_csv(out / "ppl.csv"))

    res, cfg, out = run_command(
        ANALYSIS, args, out_name="compression/" + base_key(args.model), check=check, prepare=default_ppl
    )
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    written = [out / CompressionResult.table(n).filename for n in res.tables()]
    written += save_figures(res.layers, cfg.modes, out)
    if ppl and len(ppl[0]):
        write_csv(out / "ppl_prediction.csv", ppl_prediction(res.table12, ppl[0]))
        written.append(out / "ppl_prediction.csv")
    t = res.table12
    t = t[(t["ref"] == "delta") & (t["tokens"] == "last")]
    cols = ["mode", "site", "method", "r_e_perp", "rho_e_perp", "rho_e_par", "share_perp", "share_par", "mean_e_perp"]
    print(paper_line())
    print(t[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print_written(sorted(written))
    return 0


def read_ppl_csv(path: Path):
    """The ``method, ppl`` table of ``tlgeo compress`` at ``path``; a missing file or column is an error that names
    it."""
    import pandas as pd

    if not path.is_file():
        raise FileNotFoundError(f"--ppl {path}: no such file (tlgeo compress --ppl writes <out>/ppl.csv)")
    try:
        df = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as e:  # pandas' parser errors are ValueErrors
        raise InputError(f"{path}: not a CSV table ({e})") from None
    missing = [c for c in ("method", "ppl") if c not in df.columns]
    if missing:
        raise InputError(
            f"{path}: no column {', '.join(missing)} (it has {', '.join(map(str, df.columns))}); "
            "the ppl.csv of tlgeo compress --ppl has method and ppl"
        )
    return df


# ---------------------------------------------------------------------------
# tlgeo compress
# ---------------------------------------------------------------------------


def add_compress_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p, placement=False)  # llmcompressor places the model: CompressConfig's --device
    add_config_args(p, CompressConfig)
    add_out_arg(p, OUT)
    p.add_argument("--verbose", action="store_true", help="llmcompressor's INFO log (default: its warnings only)")


def run_compress_command(args: argparse.Namespace) -> int:
    from .compress import base_dir, run_compress

    load = LoadConfig.of(args)
    load.set_threads()
    cfg = config_from_args(CompressConfig, args)  # bad method names fail here
    base_dir(args.model)  # an unknown model fails before any work
    out = _out(args)
    written = run_compress(args.model, cfg, out, verbose=args.verbose)
    if written:
        print_written(written)
    return 0


COMMANDS = (
    Command("compression", COMPRESSION_HELP, add_compression_args, run_compression, COMPRESSION_DESCRIPTION),
    Command("compress", COMPRESS_HELP, add_compress_args, run_compress_command, COMPRESS_DESCRIPTION),
)
