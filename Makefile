# `make run`: set up .venv and run the main job on the embedded SmolLM2.
# `make test`: set up .venv, run ruff (lint and format check, pyproject.toml's [tool.ruff]) and the test suite on two
# workers (the command CI runs). Each worker starts
# on a contiguous half of the tests and one that runs out takes half of the other's (worksteal), which
# finished sooner than the default round-robin scheduling here.
# Python runs with PYTHONDONTWRITEBYTECODE unset: the first process to import a module writes its .pyc
# and every later one (workers, torchrun ranks, notebook kernels, command-line subprocesses) reads it
# (scripts/setup.sh compiles nothing at install).
# A set-up that is up to date is not redone: .venv/.tlgeo-setup is touched when scripts/setup.sh succeeds, and
# setup runs again only when it is missing or older than what the environment is made from.
.PHONY: setup run test bench results

SETUP_STAMP := .venv/.tlgeo-setup

setup: $(SETUP_STAMP)

$(SETUP_STAMP): pyproject.toml constraints.txt scripts/setup.sh
	bash scripts/setup.sh
	touch $(SETUP_STAMP)

run: setup
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/tlgeo decompose --model smollm2-135m

test: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal --durations=15

# `make results`: every folder RESULTS.md quotes, rerun from its provenance at this commit (refuses uncommitted code),
# two folders at a time with one thread each; an interrupted run goes on where it stopped (--resume), in a later
# session too, as long as the code is the same
results: setup
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/reproduce.py --all --replace --resume --jobs 2

bench: setup
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/bench_overhead.py
