"""Imported once by the kill harness's fork server: every command's modules, so that each killed run
starts in milliseconds instead of importing torch again."""

import torch  # noqa: F401
import transformer_lens  # noqa: F401

from tlgeo.cli import build_parser

build_parser()  # imports and registers every analysis
