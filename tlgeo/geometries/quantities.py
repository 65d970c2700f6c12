"""Each analysis's per-token quantity on the shared pool, computed by that analysis's own code.

Every function returns a DataFrame with one row per pool token (``index``: the token's row in
:class:`~tlgeo.tokenwise.pool.StatePool`, windows in order, BOS left out) and per block ``layer``.
Block ``l`` maps ``h_l`` to ``h_{l+1}``: its updates, its output's perturbation, the state ``h_{l+1}``
split around the prediction, and the tokenwise fit of ``h_l -> h_{l+1}``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from ..decomposition.observe import parallel_profile
from ..geometry.subspaces import energy_shares, fit_pdsf, split_pdsf
from ..geometry.update_split import update_geometry
from ..hooks.perturbation import Perturbation
from ..hooks.resume import readout, resume_forward
from ..models import Model, input_device
from ..pdsf.states import directions
from ..geometry.neighbours import knn
from ..tokenwise.fits import neighbours, tokenwise_outputs
from ..tokenwise.pool import StatePool

__all__ = [
    "clean_pass",
    "decomposition_quantities",
    "damage_quantities",
    "pdsf_quantities",
    "tokenwise_quantities",
    "atypicality_quantities",
]


def _nll_next(logits: Tensor, tokens: Tensor) -> Tensor:
    """``[b, seq]`` NLL of each position's next token (NaN at the last position), float32."""
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    nll = -logp.gather(-1, tokens[:, 1:, None].to(logp.device))[..., 0]
    return torch.cat([nll, torch.full_like(nll[:, :1], float("nan"))], 1).cpu()


def clean_pass(model: Model, windows: Int[Tensor, "n seq"], layers: Sequence[int], batch_size: int = 8):
    """``(tokens, resid_pre)``: per pool token its window, position, id and text, the id's log frequency in the pool,
    the next token's NLL and the model's own prediction (argmax of its logits); and every window's
    ``blocks.l.hook_resid_pre`` for ``l`` in ``layers`` (float32 on the CPU: where perturbed runs resume)."""
    names = [f"blocks.{l}.hook_resid_pre" for l in layers]
    nll, pred, pre = [], [], {n: [] for n in names}
    for s in range(0, len(windows), batch_size):
        toks = windows[s : s + batch_size]
        with torch.inference_mode():
            logits, cache = model.run_with_cache(toks.to(input_device(model)), names_filter=lambda n: n in names)
        nll.append(_nll_next(logits, toks))
        pred.append(logits.argmax(-1).cpu())
        for n in names:
            pre[n].append(cache[n].float().cpu())
        del cache, logits
    nll, pred = torch.cat(nll)[:, 1:], torch.cat(pred)[:, 1:]  # BOS left out, as in the pool
    n, per = nll.shape
    ids = windows[:, 1:]
    counts = torch.bincount(ids.flatten())
    tok = getattr(model, "tokenizer", None)
    text = {int(t): tok.decode([int(t)]) for t in ids.unique()} if tok is not None else {}
    df = pd.DataFrame(
        {
            "index": np.arange(n * per),
            "window": np.repeat(np.arange(n), per),
            "position": np.tile(np.arange(1, per + 1), n),
            "token": ids.flatten().numpy(),
            "text": [text.get(int(t)) for t in ids.flatten()],  # as the model read it: for a report
            "log_freq": np.log(counts[ids.flatten()].numpy()),
            "nll": nll.flatten().numpy(),
            "predicted": pred.flatten().numpy(),
        }
    )
    return df, {int(n.split(".")[1]): torch.cat(v) for n, v in pre.items()}


def decomposition_quantities(
    model: Model, windows: Int[Tensor, "n seq"], layers: Sequence[int], batch_size: int = 8
) -> pd.DataFrame:
    """The parallel ratio and ``alpha`` of the attention and MLP updates and the exclude-self value
    aggregate's parallel ratio (mean over heads), per token: :func:`~tlgeo.decomposition.observe.parallel_profile`."""
    df = parallel_profile(
        model, windows, sites=("attn", "mlp", "value_excl_self"), layers=layers, batch_size=batch_size
    )
    df = df[df["pos"] > 0]
    per = windows.shape[1] - 1
    df = df.assign(index=df["seq"] * per + df["pos"] - 1)
    res = df[df["site"].isin(["attn", "mlp"])].pivot_table(
        index=["layer", "index"], columns="site", values=["parallel_ratio", "alpha"]
    )
    res.columns = [f"{site}_{'par' if q == 'parallel_ratio' else 'alpha'}" for q, site in res.columns]
    heads = df[df["site"] == "value_excl_self"].groupby(["layer", "index"])["parallel_ratio"].mean()
    return res.join(heads.rename("excl_self_par")).reset_index()


def damage_quantities(
    model: Model,
    windows: Int[Tensor, "n seq"],
    clean_nll: np.ndarray,
    resid_pre: dict[int, Tensor],
    layers: Sequence[int],
    *,
    delta: float,
    seeds: int,
    seed: int,
    batch_size: int = 8,
) -> pd.DataFrame:
    """Each token's loss change (next-token NLL) when block ``l``'s output is moved by ``delta`` of its norm
    along itself (magnitude) or across it (angle), L2-matched, mean over ``seeds`` draws; each batch draws
    its own signs and directions (:class:`~tlgeo.hooks.perturbation.Perturbation`'s ``draw``), and the forwards
    resume at block ``l`` from the clean run."""
    rows = []
    clean = clean_nll.reshape(len(windows), -1)
    for l in layers:
        out = {}
        for kind in ("angle", "magnitude"):
            total = np.zeros_like(clean)
            for r in range(seeds):
                for s in range(0, len(windows), batch_size):
                    p = Perturbation(kind, delta, seed=seed * 1000 + r, layers=l, relative=True, draw=s + 1)
                    with torch.inference_mode():
                        logits = resume_forward(
                            model, resid_pre[l][s : s + batch_size].to(input_device(model)), l, p.hooks(model)
                        )
                    total[s : s + batch_size] += _nll_next(logits, windows[s : s + batch_size])[:, 1:].numpy()
            out[f"damage_{kind}"] = (total / seeds - clean).flatten()
        rows.append(pd.DataFrame({"layer": l, "index": np.arange(clean.size), **out}))
    return pd.concat(rows, ignore_index=True)


def pdsf_quantities(
    model: Model,
    pool: StatePool,
    predicted: np.ndarray,
    layers: Sequence[int],
    *,
    mode: str = "exact",
    chunk: int = 256,
) -> pd.DataFrame:
    """Each state ``h_{l+1}``'s P, D, S and F energy shares with the model's own next-token prediction at that
    position (``predicted``) as the anchor, D and S fitted on the pool's states of that layer, and the rank of
    that prediction in the logit lens of ``h_{l+1}`` (0: already the top token)."""
    target = torch.as_tensor(np.array(predicted))
    u = directions(model, target)
    rows = []
    for l in layers:
        h = torch.from_numpy(np.array(pool.states(l + 1), dtype=np.float32))
        shares = energy_shares(split_pdsf(h, u, fit_pdsf(h, u, mode=mode)))
        ranks = []
        for s in range(0, len(h), chunk):
            with torch.inference_mode():
                logits = readout(model, h[s : s + chunk].to(input_device(model))).float()
            top = logits.gather(-1, target[s : s + chunk, None].to(logits.device))
            ranks.append((logits > top).sum(-1).cpu())
        rows.append(
            pd.DataFrame(
                {
                    "layer": l,
                    "index": np.arange(len(h)),
                    **{p: v.float().numpy() for p, v in shares.items()},
                    "lens_rank": torch.cat(ranks).numpy(),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def tokenwise_quantities(
    pool: StatePool, layers: Sequence[int], *, k: int = 32, ridge: float = 1e-3, threads: int = 1
) -> pd.DataFrame:
    """Each token's relative error ``||h_{l+1} - T(h_l)|| / ||h_{l+1} - h_l||`` of the local linear tokenwise fit
    on its ``k`` nearest neighbours (other windows only)."""
    rows = []
    for l in layers:
        h_in, h_out = pool.pair(l)
        t = tokenwise_outputs(pool, l, "linear", k=k, ridge=ridge, threads=threads)
        g = update_geometry(h_in, h_out, t)
        rows.append(pd.DataFrame({"layer": l, "index": np.arange(len(h_in)), "tok_error": g.rel_error.float().numpy()}))
    return pd.concat(rows, ignore_index=True)


def atypicality_quantities(pool: StatePool, layers: Sequence[int], *, k: int = 32, chunk: int = 256) -> pd.DataFrame:
    """How atypical each token's state is in the pool: ``state_norm`` ``||h_{l+1}||`` (the state PDSF splits and
    the tokenwise fit predicts), ``knn_dist``, the mean Euclidean distance of ``h_l`` to the ``k`` neighbours
    its local tokenwise fit is fitted on (the same neighbours: :func:`tlgeo.tokenwise.fits.neighbours`, other
    windows only, read from the pool's cache when the fit has run), and ``knn_dist_out``, the same for
    ``h_{l+1}`` among the pool's states after block ``l`` (PDSF's state), in float64."""
    rows = []
    for l in layers:
        h_in = torch.from_numpy(np.array(pool.states(l), dtype=np.float64))
        h_out = torch.from_numpy(np.array(pool.states(l + 1), dtype=np.float64))

        def mean_distance(h: torch.Tensor, layer: int) -> torch.Tensor:
            if layer < pool.n_layers:  # the tokenwise fit's own neighbours (cached with the pool)
                nb = neighbours(pool, layer, k, exclude_sequence=True)
            else:  # the last state: no layer map starts there, the same search
                nb = knn(h.float(), k, groups=torch.from_numpy(pool.window), exclude_group=True)[1]
            return torch.cat(
                [(h[s : s + chunk, None] - h[nb[s : s + chunk]]).norm(dim=-1).mean(-1) for s in range(0, len(h), chunk)]
            )

        rows.append(
            pd.DataFrame(
                {
                    "layer": l,
                    "index": np.arange(len(h_in)),
                    "state_norm": h_out.norm(dim=-1).numpy(),
                    "knn_dist": mean_distance(h_in, l).numpy(),
                    "knn_dist_out": mean_distance(h_out, l + 1).numpy(),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)
