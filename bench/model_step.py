"""Training-step throughput of `build_model` against Hugging Face's GPT2LMHeadModel (SDPA).

Both models get the same shapes (GPT-2 layout: learned positions, GELU, pre-LN, biases, tied
embeddings, no dropout), the same batch and AdamW. Steps of the two are interleaved (ours, theirs,
ours, ...) so that machine noise hits both alike; the ratio of median tokens/s is reported for
eager mode and, with ``--compile``, for `torch.compile` too. Also times the cost model.

Usage: ``python bench/model_step.py [--threads 2] [--steps 8] [--compile]``; prints a table and
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from models import ModelConfig, build_model, cost

SIZES = [  # name, d_model, n_layers, n_heads, seq_len, batch
    ("d128-L4", 128, 4, 4, 256, 8),
    ("d256-L6", 256, 6, 8, 256, 8),
]
VOCAB = 8192


def hf_model(d_model: int, n_layers: int, n_heads: int, seq_len: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=seq_len, n_embd=d_model, n_layer=n_layers,
        n_head=n_heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        attn_implementation="sdpa", bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def make_step(model, hf: bool):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step(idx):
        if hf:
            loss = model(input_ids=idx, labels=idx).loss
        else:
            _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def compare(size, steps: int, compile_: bool) -> dict:
    name, d, n_layers, n_heads, seq_len, batch = size
    torch.manual_seed(0)
    ours = build_model(ModelConfig(vocab_size=VOCAB, seq_len=seq_len, d_model=d,
                                   n_heads=n_heads, n_layers=n_layers))
    theirs = hf_model(d, n_layers, n_heads, seq_len)
    assert ours.num_params() == theirs.num_parameters(), (ours.num_params(),
                                                          theirs.num_parameters())
    if compile_:
        ours, theirs = torch.compile(ours), torch.compile(theirs)
    step_ours, step_theirs = make_step(ours, hf=False), make_step(theirs, hf=True)
    idx = torch.randint(0, VOCAB, (batch, seq_len))
    for _ in range(2 if not compile_ else 3):  # warm-up (and compile)
        step_ours(idx)
        step_theirs(idx)
    t_ours, t_theirs = [], []
    for _ in range(steps):
        for fn, out in ((step_ours, t_ours), (step_theirs, t_theirs)):
            start = time.perf_counter()
            fn(idx)
            out.append(time.perf_counter() - start)
    tokens = batch * seq_len
    ours_tps = tokens / statistics.median(t_ours)
    theirs_tps = tokens / statistics.median(t_theirs)
    return {
        "size": name,
        "mode": "compile" if compile_ else "eager",
        "n_params": ours.num_params() if not compile_ else None,
        "ours_tokens_per_s": round(ours_tps, 1),
        "hf_tokens_per_s": round(theirs_tps, 1),
        "ratio": round(ours_tps / theirs_tps, 3),
    }


def time_cost_model(n: int = 10_000) -> float:
    configs = [
        ModelConfig(d_model=64 * (1 + i % 16), n_heads=4, n_layers=1 + i % 12, seq_len=1024,
                    attn_pattern=("dense", "local", "strided")[i % 3],
                    attn_sparsity=0.0 if i % 3 == 0 else 0.5)
        for i in range(64)
    ]
    start = time.perf_counter()
    for i in range(n):
        cost.estimate(configs[i % len(configs)], batch_size=8)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="also compare torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [compare(size, args.steps, False) for size in SIZES]
    if args.compile:
        rows += [compare(size, args.steps, True) for size in SIZES]
    for r in rows:
        print(f"{r['size']:>8} {r['mode']:>7}: ours {r['ours_tokens_per_s']:>9.1f} tok/s, "
              f"HF GPT2 {r['hf_tokens_per_s']:>9.1f} tok/s, ratio {r['ratio']:.3f}")
    cost_s = time_cost_model()
    print(f"cost model: 10,000 estimates in {cost_s:.3f} s")
    eager = [r["ratio"] for r in rows if r["mode"] == "eager"]
    print(json.dumps({
        "bench": "model_step",
        "device": "cpu",
        "threads": args.threads,
        "rows": rows,
        "min_eager_ratio": min(eager),
        "target_eager_ratio": 1.0,
        "cost_model_10k_s": round(cost_s, 4),
    }))


if __name__ == "__main__":
    main()
