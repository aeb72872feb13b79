"""Text from a byte-level model (``sweep sample``): encode a prompt, sample, decode.

Byte-level corpora (``builtin:``, ``text:``) train on raw UTF-8 bytes, ids 0-255, so a prompt
is its UTF-8 bytes and the output is decoded back (bytes that do not form UTF-8, as a sample
cut inside a character can leave, become U+FFFD). Sampling is nanoGPT's ``generate``
(karpathy/nanoGPT ``model.py``): the context cropped to the model's ``seq_len``, logits of
the last position divided by the temperature, one token drawn from their softmax; temperature
0 takes the most likely token.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["BYTE_VOCAB", "decode_bytes", "encode_text", "generate"]

#: Ids a byte-level corpus uses (a model may have a larger vocab; those ids never occur).
BYTE_VOCAB = 256


def encode_text(text: str) -> list[int]:
    """The byte-level ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode_bytes(ids: list[int]) -> str:
    """Text of byte-level ids (invalid UTF-8 replaced by U+FFFD).

    Raises:
        ValueError: An id outside 0-255.
    """
    return bytes(ids).decode("utf-8", errors="replace")


def generate(module: Any, prompt_ids: list[int], n_tokens: int, *, temperature: float = 1.0,
             seed: int = 0, vocab_limit: int | None = None, top_k: int | None = None
             ) -> list[int]:
    """Sample ``n_tokens`` ids after ``prompt_ids`` from a causal language model.

    Args:
        module: A `sweep_models.transformer.Transformer` (its forward maps ids ``(B, T)`` to logits
            ``(B, T, vocab_size)``); put in eval mode here.
        prompt_ids: At least one id.
        n_tokens: Ids to generate, >= 0.
        temperature: Softmax temperature, >= 0; 0 is greedy.
        seed: Seeds a generator of its own, so the same seed gives the same text.
        vocab_limit: Draw only ids below this (``BYTE_VOCAB`` for byte-level models).
        top_k: Draw only from the ``top_k`` most likely ids (None: all).

    Returns:
        The generated ids, without the prompt.

    Raises:
        ValueError: An empty prompt, or a negative ``n_tokens`` or ``temperature``.
    """
    import torch

    if not prompt_ids:
        raise ValueError("the prompt must hold at least one token")
    if n_tokens < 0 or not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"n_tokens={n_tokens} and temperature={temperature} must be >= 0")
    device = next(module.parameters()).device
    seq_len = module.config.seq_len
    generator = torch.Generator(device=device).manual_seed(seed)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # (1, T)
    module.eval()
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n_tokens):
            context = ids[:, -seq_len:]  # (1, <= seq_len)
            logits = module(context)[:, -1, :]  # (1, vocab_size)
            if vocab_limit is not None:
                logits = logits[:, :vocab_limit]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)  # (1, 1)
            else:
                logits = logits.float() / temperature
                if top_k is not None and top_k < logits.size(-1):
                    kth = torch.topk(logits, top_k).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, -math.inf)
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (1, 1)
            ids = torch.cat([ids, nxt], dim=1)
            out.append(int(nxt))
    return out

