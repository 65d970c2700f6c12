# `make run`: set up .venv and run the main job on the embedded SmolLM2.
# `make test`: set up .venv and run the test suite on two workers (the command CI runs).
.PHONY: setup run test bench

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/tlgeo run --model smollm2-135m

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2

bench: setup
	.venv/bin/python scripts/bench_overhead.py
