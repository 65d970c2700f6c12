"""Shared by the RULER tests: target lengths and the tokenizers/models they run on."""

import pytest

L = 800  # byte tokenizer: RULER templates take 370-650 tokens
L_LIST = 1000  # cwe/fwe: room for 10 common words seen 5 times
L_LONG = 1600  # vt with its one-shot example; qa_boolq (a BoolQ passage is up to ~1500 bytes)
APPROX = ("cwe", "fwe", "qa_boolq")  # lengths hit within a few tokens, not exactly


def _length(task):
    return {"cwe": L_LIST, "fwe": L_LIST, "vt": L_LONG, "qa_boolq": 2000}.get(task, L)


@pytest.fixture(scope="module")
def llama():
    """Tiny Llama (GQA 4/2 heads, byte tokenizer) with a 2048-token context."""
    from tlgeo.models import tiny_model

    return tiny_model("llama", max_position_embeddings=2048)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    try:
        from tlgeo.models import embedded_model_dir
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(embedded_model_dir("smollm2-135m")))
    except Exception as e:
        pytest.skip(f"SmolLM2 tokenizer not available: {e}")
