# `make run`: set up .venv and run the main job on the embedded SmolLM2.
# `make test`: set up .venv and run the test suite on two workers (the command CI runs). Each worker starts
# on a contiguous half of the tests and one that runs out takes half of the other's (worksteal): on
# 2026-12-02 256 s against 264 s with the default round-robin scheduling (same tree, same machine).
.PHONY: setup run test bench

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/tlgeo run --model smollm2-135m

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal

bench: setup
	.venv/bin/python scripts/bench_overhead.py
