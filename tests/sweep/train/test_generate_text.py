"""Sampling text from a model (`sweep.train.generate`)."""

import pytest
import torch

from sweep.train.generate import decode_bytes, encode_text, generate
from sweep_models.config import ModelConfig
from sweep_models.transformer import build_model


def _model(**changes):
    torch.manual_seed(0)
    values = {"vocab_size": 256, "seq_len": 16, **changes}
    return build_model(ModelConfig.from_preset("tiny", **values))


def test_greedy_takes_the_argmax_of_the_full_forward_each_step():
    model = _model()
    prompt = encode_text("def f(x):")
    out = generate(model, prompt, 12, temperature=0)  # 9 + 12 > seq_len: the context is cropped
    ids = list(prompt)
    with torch.no_grad():
        for token in out:
            context = torch.tensor([ids[-16:]])
            assert token == int(model(context)[0, -1].argmax())
            ids.append(token)


def test_the_same_seed_gives_the_same_text_and_another_seed_other_text():
    model = _model()
    prompt = encode_text("import ")
    first = generate(model, prompt, 40, temperature=1.0, seed=3)
    assert generate(model, prompt, 40, temperature=1.0, seed=3) == first
    assert generate(model, prompt, 40, temperature=1.0, seed=4) != first
    assert len(first) == 40


def test_ids_beyond_the_byte_range_are_never_drawn():
    model = _model(vocab_size=4096)  # an untrained model puts most mass on ids >= 256
    out = generate(model, [65], 200, temperature=2.0, vocab_limit=256)
    assert max(out) < 256
    assert max(generate(model, [65], 200, temperature=2.0)) >= 256


def test_top_k_draws_only_among_the_k_likeliest():
    model = _model()
    ids = [65]
    out = generate(model, ids, 1, temperature=1.0, top_k=2, seed=0)
    with torch.no_grad():
        top = torch.topk(model(torch.tensor([ids]))[0, -1], 2).indices.tolist()
    assert out[0] in top


def test_text_round_trips_through_bytes_and_cut_characters_are_replaced():
    text = "naïve café ∑"
    assert decode_bytes(encode_text(text)) == text
    assert decode_bytes(encode_text("é")[:1]) == "\ufffd"


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"prompt_ids": []}, "at least one token"),
    ({"n_tokens": -1}, "n_tokens=-1"),
    ({"temperature": -0.5}, "temperature=-0.5"),
])
def test_bad_arguments_raise(kwargs, needle):
    args = {"prompt_ids": [65], "n_tokens": 1, **kwargs}
    with pytest.raises(ValueError, match=needle):
        generate(_model(), args.pop("prompt_ids"), args.pop("n_tokens"), **args)
