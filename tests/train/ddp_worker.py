"""A tiny DDP (or FSDP2) training run, as each torchrun rank runs it, or alone (``mode`` ``none``): each
rank writes ``OUT/rank<r>.json`` with a hash and the absolute sum of its final weights.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/train/ddp_worker.py OUT ddp

The data-parallel test's run is part of the shared torchrun launch (:mod:`tests.torchrun_worker`).
"""

import hashlib
import json
import sys
import warnings


def main(out: str, mode: str) -> None:
    warnings.filterwarnings("ignore")
    import torch

    from tlgeo.train import ModelSpec, TrainConfig, train

    torch.set_num_threads(1)
    cfg = TrainConfig(
        model=ModelSpec(arch="llama", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, context=32),
        variant="value_full",
        data="mobydick",
        max_data_tokens=20000,
        data_dir=out + "/data",
        seq_len=16,
        batch_size=4,
        grad_accum=2 if mode == "ddp" else 1,
        steps=3,
        warmup=1,
        eval_every=3,
        eval_batches=2,
        dist=mode,
        out=out + "/run",
    )

    def on_end(model, info):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        h = hashlib.sha256()
        for k in sorted(sd):
            h.update(k.encode())
            h.update(sd[k].detach().float().cpu().numpy().tobytes())
        with open(f"{out}/rank{info.rank}.json", "w") as f:
            json.dump(
                {
                    "hash": h.hexdigest(),
                    "world": info.world,
                    "mode": info.mode,
                    "sum": float(sum(v.detach().float().abs().sum() for v in sd.values())),
                },
                f,
            )

    train(cfg, log=lambda *a: None, on_end=on_end)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
