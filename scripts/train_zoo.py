#!/usr/bin/env python
"""Train the zoo's models (tlgeo.train.zoo) and export them to zoo/ with zoo.json.

    python scripts/train_zoo.py                    # every zoo model (a few minutes each on 2 CPU cores)
    python scripts/train_zoo.py induction-gpt      # one
    python scripts/train_zoo.py --steps 20 --root /tmp/zoo --checkpoints /tmp/zoo-ck   # a smoke run elsewhere

An interrupted run resumes from checkpoints/zoo/<name>. zoo.json records the command that retrains the
model, its weights' SHA-256 (a rerun on the same machine and torch reproduces it), the final validation loss
and the heads whose attention scores name them.
"""

from __future__ import annotations

import argparse
import sys
import warnings

warnings.filterwarnings("ignore")

from tlgeo.train.zoo import ZOO, train_zoo_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help=f"zoo models (default: all of {sorted(ZOO)})")
    p.add_argument("--root", default=None, help="where to export (default: the repository's zoo/)")
    p.add_argument("--checkpoints", default=None, help="training runs (default: checkpoints/zoo)")
    p.add_argument("--steps", type=int, default=None, help="a shorter run than the zoo's (a smoke test)")
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in ZOO]
    if unknown:
        p.error(f"unknown zoo model(s) {unknown}; choose from {sorted(ZOO)}")
    for name in a.names or sorted(ZOO):
        train_zoo_model(name, a.root, steps=a.steps, checkpoints=a.checkpoints)
    return 0


if __name__ == "__main__":
    sys.exit(main())
