"""The settings of the tiny atlas run the tests share (``atlas_run`` in tests/conftest.py)."""

from tlgeo.report.atlas import AtlasConfig


def tiny_cfg(out):
    return AtlasConfig(model="tiny:llama", out=out, budgets=dict(
        context=64, profile_tokens=128, sweep_tokens=128,
        s_par_grid=(0.0, 2.0), s_perp_grid=(0.5,), compare_scales=(0.0,),
        compare_sites=("value_excl_self", "attn"), zeroshot_tasks=("piqa",), zeroshot_limit=2,
        ruler_lengths=(), heads_texts=3, heads_length=32, n_perm=50, mlp_carrier_tokens=128,
        closed_form_tokens=16, dirmag_sentences=5, dirmag_seeds=1, dirmag_probe_sentences=8, dirmag_probe_layers=2,
        tokenwise_tokens=150, tokenwise_seq_len=16, tokenwise_k=8, tokenwise_patch_tokens=12,
        tokenwise_classes=("linear", "global"), dirmag_blimp_pairs=2,
        pdsf_geometry_per_group=2, pdsf_generation_per_group=1, pdsf_new_tokens=3,
        patching_tasks=("induction", "ioi"), patching_prompts=4, patching_min_accuracy=0.0,
        patching_path_senders=("L0H1",), patching_path_receivers=("L1", "logits"),
        circuits_tasks=("induction",), circuits_prompts=4, circuits_k=(0, 5, 20), circuits_verify=3,
        geometries_tokens=60, geometries_seq_len=16, geometries_layer_count=2, geometries_k=8,
    ))
