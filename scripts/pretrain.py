#!/usr/bin/env python
"""Pretrain a causal LM from scratch with a parallel-suppression variant.

    python scripts/pretrain.py --arch gpt --variant value_full --steps 300 --out checkpoints/pretrain/gpt-vfull
    torchrun --nproc_per_node=2 scripts/pretrain.py --dist ddp ...     # DDP (gloo on CPU, NCCL on GPU)
    torchrun --nproc_per_node=8 scripts/pretrain.py --dist fsdp ...    # FSDP, one shard per block

See ``python scripts/pretrain.py -h`` and README "Pretraining with parallel suppression".
"""

import sys
import warnings

warnings.filterwarnings("ignore")

from tlgeo.train.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
