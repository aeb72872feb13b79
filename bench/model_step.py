"""Training-step throughput of `build_model` against a textbook GPT and Hugging Face's GPT-2.

Three models with the same shapes and options (GPT-2 layout: dense causal attention, learned
positions, GELU (tanh), pre-LayerNorm, biases, tied embeddings, no dropout), the same batch and
their own AdamW (``foreach``), trained step by step (forward, backward, optimizer step):

- ``ours``: ``build_model(ModelConfig(...))``;
- ``reference``: `bench/gpt_reference.py`, a one-file nanoGPT-style GPT (fused QKV, SDPA with
  ``is_causal=True``): what a careful hand-written model costs;
- ``hf``: ``transformers.GPT2LMHeadModel`` with its SDPA attention (left out, with the reason
  printed, where transformers is missing or does not import).

Steps of the three are interleaved and the order rotates every round (ours, reference, hf; then
reference, hf, ours; ...), so machine noise and cache state hit all alike; each figure is the
median over the rounds, and ratios are ours / theirs in tokens/s (> 1: ours is faster): the
ratio of the medians, and the median of the ratios within each round (``paired_``). With
``--compile`` the same is done for `torch.compile` of each. Also times the cost model.

With ``--compile``, ours compiled is also set against ours eager: the speedup per step, the
compile time (the first step's time beyond a steady one) and after how many steps compiling pays.

Measured (``--compile --sizes d128-L4 --steps 10``, 2 CPUs, torch 2.13 CPU, load average 3.1
at start, 4.3 at end; HF left out: its GPT-2 did not import): ours eager 1,765 tokens/s (1.07x
the reference), ours compiled 1,102 tokens/s: 0.62x eager per step after 43 s of compiling,
so on this CPU ``train.compile`` never paid (the eager and compiled rows ran one after the
other, not interleaved, under other load).

Usage: ``python bench/model_step.py [--threads 2] [--steps 10] [--compile] [--sizes d128-L4]``;
prints a table and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from gpt_reference import GPT  # bench/ is on sys.path when this file runs as a script

from sweep_models import ModelConfig, build_model, cost

SIZES = [  # name, d_model, n_layers, n_heads, seq_len, batch
    ("d128-L4", 128, 4, 4, 256, 8),
    ("d256-L4", 256, 4, 4, 256, 16),
    ("d256-L6", 256, 6, 8, 256, 8),
]
VOCAB = 8192


def hf_problem() -> str | None:
    """Why Hugging Face's GPT-2 cannot be built here (transformers missing or broken), or None."""
    try:
        from transformers import GPT2LMHeadModel  # noqa: F401
    except Exception as err:  # noqa: BLE001 - any import failure: run without it, and say why
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return None


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


def build(size) -> dict[str, torch.nn.Module]:
    _, d, n_layers, n_heads, seq_len, _ = size
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=VOCAB, seq_len=seq_len, d_model=d, n_heads=n_heads,
                         n_layers=n_layers, attn_pattern="dense", causal=True, activation="gelu",
                         norm="layernorm", norm_position="pre", pos_encoding="learned",
                         tie_embeddings=True, bias=True, dropout=0.0)
    models = {
        "ours": build_model(config),
        "reference": GPT(VOCAB, seq_len, d, n_heads, n_layers),
    }
    if hf_problem() is None:
        models["hf"] = hf_model(d, n_layers, n_heads, seq_len)
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    assert len(set(counts.values())) == 1, counts
    return models


def compare(size, steps: int, compile_: bool) -> dict:
    name, *_, seq_len, batch = size
    models = build(size)
    n_params = sum(p.numel() for p in models["ours"].parameters())
    if compile_:
        models = {k: torch.compile(m) for k, m in models.items()}
    names = tuple(models)
    step = {k: make_step(m, hf=k == "hf") for k, m in models.items()}
    idx = torch.randint(0, VOCAB, (batch, seq_len))
    first: dict[str, float] = {}
    for _ in range(3 if compile_ else 2):  # warm-up (and compile, in the first step)
        for k in names:
            start = time.perf_counter()
            step[k](idx)
            first.setdefault(k, time.perf_counter() - start)
    times: dict[str, list[float]] = {k: [] for k in names}
    for i in range(steps):
        for k in names[i % len(names):] + names[:i % len(names)]:
            start = time.perf_counter()
            step[k](idx)
            times[k].append(time.perf_counter() - start)
    tokens = batch * seq_len
    tps = {k: tokens / statistics.median(v) for k, v in times.items()}

    def paired(other: str) -> float | None:
        # Median over rounds of the ratio within each round: drift between rounds cancels.
        if other not in times:
            return None
        ratios = [o / u for u, o in zip(times["ours"], times[other], strict=True)]
        return round(statistics.median(ratios), 3)

    return {
        "size": name,
        "mode": "compile" if compile_ else "eager",
        "n_params": n_params,
        "batch": batch,
        "seq_len": seq_len,
        "steps": steps,
        "ours_tokens_per_s": round(tps["ours"], 1),
        "reference_tokens_per_s": round(tps["reference"], 1),
        "hf_tokens_per_s": round(tps["hf"], 1) if "hf" in tps else None,
        "ratio_vs_reference": round(tps["ours"] / tps["reference"], 3),
        "ratio_vs_hf": round(tps["ours"] / tps["hf"], 3) if "hf" in tps else None,
        "paired_ratio_vs_reference": paired("reference"),
        "paired_ratio_vs_hf": paired("hf"),
        # The first step's time beyond a steady one: compilation (and first-call set-up).
        "ours_first_step_extra_s": round(first["ours"] - statistics.median(times["ours"]), 3),
        "ours_step_s": round(statistics.median(times["ours"]), 5),
    }


def compile_gain(rows: list[dict]) -> list[dict]:
    """Per size: ours compiled against ours eager, and after how many steps compiling pays.

    ``pays_after_steps`` = extra first-step time of the compiled model (its compilation) over
    the time it saves per step; None when it saves none.
    """
    eager = {r["size"]: r for r in rows if r["mode"] == "eager"}
    out = []
    for r in (r for r in rows if r["mode"] == "compile"):
        e = eager[r["size"]]
        saved = e["ours_step_s"] - r["ours_step_s"]
        cost_s = r["ours_first_step_extra_s"] - e["ours_first_step_extra_s"]
        out.append({"size": r["size"], "compile_s": round(cost_s, 2),
                    "speedup": round(r["ours_tokens_per_s"] / e["ours_tokens_per_s"], 3),
                    "pays_after_steps": math.ceil(cost_s / saved) if saved > 0 else None})
    return out


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
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also compare torch.compile")
    parser.add_argument("--sizes", nargs="+", choices=[s[0] for s in SIZES],
                        default=[s[0] for s in SIZES], help="Sizes to run (default: all).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [s for s in SIZES if s[0] in args.sizes]
    rows = [compare(size, args.steps, False) for size in sizes]
    if args.compile:
        rows += [compare(size, args.steps, True) for size in sizes]
    hf_skipped = hf_problem()
    if hf_skipped:
        print(f"HF GPT2 not run: {hf_skipped}")
    for r in rows:
        hf = ("" if hf_skipped else f"HF GPT2 {r['hf_tokens_per_s']:>8.1f} "
              f"({r['ratio_vs_hf']:.3f}x, paired {r['paired_ratio_vs_hf']:.3f}x)")
        print(f"{r['size']:>8} {r['mode']:>7}: ours {r['ours_tokens_per_s']:>8.1f} tok/s, "
              f"reference {r['reference_tokens_per_s']:>8.1f} ({r['ratio_vs_reference']:.3f}x, "
              f"paired {r['paired_ratio_vs_reference']:.3f}x) {hf}")
    gains = compile_gain(rows)
    for g in gains:
        pays = (f"pays after {g['pays_after_steps']} steps" if g["pays_after_steps"]
                else "never pays (no faster per step)")
        print(f"{g['size']:>8} torch.compile: {g['speedup']:.3f}x eager per step, compiling "
              f"takes {g['compile_s']:.1f} s: {pays}")
    cost_s = time_cost_model()
    print(f"cost model: 10,000 estimates in {cost_s:.3f} s")
    eager = [r for r in rows if r["mode"] == "eager"]
    print(json.dumps({
        "bench": "model_step",
        "device": "cpu",
        "threads": args.threads,
        "rows": rows,
        "min_eager_ratio_vs_reference": min(r["ratio_vs_reference"] for r in eager),
        "min_eager_ratio_vs_hf": None if hf_skipped else min(r["ratio_vs_hf"] for r in eager),
        "hf_skipped": hf_skipped,
        "target_eager_ratio": 1.0,
        "compile_gain": gains,
        "cost_model_10k_s": round(cost_s, 4),
    }))


if __name__ == "__main__":
    main()
