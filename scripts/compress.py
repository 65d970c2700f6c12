#!/usr/bin/env python
"""Compress a model with llmcompressor, then evaluate perplexity / zero-shot accuracy.

Kept for the commands in the README and users' scripts: it runs ``tlgeo compress`` with the
same flags (``tlgeo compress --help``; the code is :mod:`tlgeo.compression.compress`)::

    .venv/bin/python scripts/compress.py --model smollm2-135m \\
        --methods awq,awq_perp,wanda,owl,sgpt,sgpt_perp,rtn_w3g64 --ppl

Compressed models go to ``$TLGEO_CACHE/compressed/<model>/<method>``; evaluations to
``--out`` (default ``runs/compression/<model>``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlgeo.cli import main as tlgeo_main  # noqa: E402


def main(argv=None) -> int:
    return tlgeo_main(["compress", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
