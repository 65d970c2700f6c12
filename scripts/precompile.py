"""Write the bytecode of what tlgeo and its tests import, once, at set-up (``scripts/setup.sh`` runs it
beside the model conversion, on the other core).

The environment is installed without compiling its ~21,000 modules (most are never imported: compiling
them all was most of the install's time on two cores). Importing is what compiles a module; with
``PYTHONDONTWRITEBYTECODE`` unset the ``.pyc`` is written and every later process reads it. This imports
the stack, every tlgeo module and the Hugging Face modeling module of every family tlgeo knows.

    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/precompile.py
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

STACK = (
    "torch",
    "transformers",
    "transformer_lens",
    "accelerate",
    "datasets",
    "pandas",
    "scipy.stats",
    "sklearn.linear_model",
    "sklearn.decomposition",
    "sklearn.metrics",
    "sklearn.neural_network",
    "matplotlib.pyplot",
    "circuitsvis.tokens",
    "gguf",
    "safetensors.torch",
    "skdim",
    "faiss",
    "jaxtyping",
    "einops",
    "conllu",
    "tqdm",
    "lm_eval",
    "lm_eval.api.model",
    "lm_eval.tasks",
    "llmcompressor",
    "pytest",
    "xdist",
    "hypothesis",
    "nbclient",
    "nbformat",
    "ipykernel.kernelapp",
    "sphinx.application",
    "myst_parser",
    "furo",
)


def main() -> int:
    sys.dont_write_bytecode = False
    t0, failed = time.perf_counter(), []

    def load(name: str) -> None:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - reported below; the test run will say more
            failed.append(f"{name}: {type(e).__name__}: {e}")

    for name in STACK:
        load(name)
    import tlgeo

    for info in pkgutil.walk_packages(tlgeo.__path__, "tlgeo."):
        if not info.name.endswith("__main__"):  # python -m tlgeo: the command line itself
            load(info.name)
    import transformers

    from tlgeo.families import FAMILIES

    for family in FAMILIES.values():  # the tiny models' modeling code (transformers imports it lazily)
        if ":" in family.config_class:  # tlgeo's own config class (tracr): its model is in tlgeo.models, loaded above
            continue
        config = getattr(transformers, family.config_class).__module__
        load(config.replace(".configuration_", ".modeling_"))
    print(f"bytecode of {len(sys.modules)} modules written or found in {time.perf_counter() - t0:.0f} s")
    for line in failed:
        print(f"could not import {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
