"""A torchrun worker whose rank 1 is SIGKILLed in the middle of its K-th write on the first attempt; on the
restart torchrun makes (``--max-restarts 1``) every rank reruns the same command into the same folder.

    python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 1 \\
        tests/faults/rank_worker.py K OUT tlgeo-argv...
"""

import os
import signal
import sys

# the dying-rank test's command (dirmag's tiny config): killed here, rerun by tests/torchrun_worker.py
DYING = ["dirmag", "--model", "tiny:llama", "--sentences", "3", "--absolute-deltas", "1.0", "--norm-fractions", "",
         "--seeds", "2", "--blimp-pairs", "1", "--probe-sentences", "4", "--probe-layer-count", "2",
         "--batch-size", "4"]


def main() -> int:
    k, out, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    import torch

    from tlgeo.cli import main as tlgeo
    from tlgeo.storage import files

    torch.set_num_threads(1)  # as the one-process reference run
    if os.environ.get("RANK") == "1" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        real, count = files._write, [0]

        def write(f, data):
            count[0] += 1
            if count[0] == k:
                real(f, data[: len(data) // 2])
                os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            real(f, data)

        files._write = write
    return tlgeo([*argv, "--out", out])


if __name__ == "__main__":
    sys.exit(main())
