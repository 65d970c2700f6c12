"""Files from elsewhere run no code: nothing in tlgeo unpickles with ``weights_only=False`` or lets a model
folder bring its own code."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tlgeo"


def test_no_unsafe_loading_anywhere_in_the_package():
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(
                r"weights_only\s*=\s*False|trust_remote_code\s*=\s*True|pickle\.loads?\(|torch\.load\((?!.*weights_only\s*=\s*True)",
                code,
            ):
                found.append(f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
