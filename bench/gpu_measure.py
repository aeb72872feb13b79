"""The GPU check's measurements that need only torch and `sweep_models` (`bench/gpu_check.py`).

- `mfu_case`: train-step throughput and model FLOPs utilisation (MFU; Chowdhery et al. 2022,
  "PaLM", appendix B) in bf16 autocast, eager or `torch.compile`, with the trainer's own AdamW
  (`sweep.train.optim.build_adamw`). Two FLOP counts: the cost model's exact matmul count
  (`sweep_models.cost.flops_per_token(train=True)`) and nanoGPT's `estimate_mfu` convention,
  6N + 12*L*H*q*T per token (karpathy/nanoGPT `model.py`; `dense=True` here).
- `memory_case`: the training-memory estimate (`sweep_models.cost.estimate`) against
  `torch.cuda.max_memory_allocated` over a steady-state step (the second: the optimizer state
  exists).
- `flex_case`: forward + backward time of a FlexAttention model at a block-sparse layout against
  the same model dense, beside the ratio of the cost model's FLOPs: does it skip the masked
  blocks?

Each returns a plain dict of figures. Timings synchronise the device around the timed steps.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from sweep.train.config import TrainConfig
from sweep.train.hardware import peak_flops
from sweep.train.optim import build_adamw
from sweep_models import ModelConfig, build_model
from sweep_models.cost import estimate, flops_per_token

# name -> ModelConfig fields; the sizes the issue asks for, GPT-2-medium-like depth.
MFU_MODELS: dict[str, dict[str, Any]] = {
    "d1024-L24": {"d_model": 1024, "n_heads": 16, "n_layers": 24, "seq_len": 1024,
                  "vocab_size": 50304, "bias": False},
    "d2048-L24": {"d_model": 2048, "n_heads": 16, "n_layers": 24, "seq_len": 1024,
                  "vocab_size": 50304, "bias": False},
}
MFU_BATCH = {"d1024-L24": 16, "d2048-L24": 8}

_MEM_BASE: dict[str, Any] = {"vocab_size": 8192, "seq_len": 1024, "d_model": 768,
                             "n_heads": 12, "n_layers": 6}
# name -> (ModelConfig overrides, batch size, dtype): dense, GQA, the two sparse patterns on
# FlexAttention, an encoder-decoder, and fp32 with dropout.
MEMORY_CASES: dict[str, tuple[dict[str, Any], int, str]] = {
    "dense-bf16": ({}, 8, "bf16"),
    "gqa-bf16": ({"n_kv_heads": 4, "activation": "swiglu", "norm": "rmsnorm",
                  "pos_encoding": "rope"}, 8, "bf16"),
    "local-flex-bf16": ({"attn_pattern": "local", "attn_sparsity": 0.5,
                         "attn_backend": "flex"}, 8, "bf16"),
    "block-sparse-flex-bf16": ({"attn_pattern": "block_sparse", "attn_sparsity": 0.75,
                                "attn_block_size": 128, "attn_backend": "flex"}, 8, "bf16"),
    "encoder-decoder-bf16": ({"arch": "encoder_decoder", "n_encoder_layers": 3,
                              "n_decoder_layers": 3, "src_len": 512}, 8, "bf16"),
    "dense-fp32-dropout": ({"dropout": 0.1}, 4, "fp32"),
}


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued kernels (CUDA), so a timer around them measures them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_fn(model: Any, forward: Callable[..., Any], opt: torch.optim.Optimizer,
             amp: torch.dtype | None, device: torch.device) -> Callable[[Any, Any], None]:
    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            _, loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _batch(cfg: ModelConfig, batch: int, device: torch.device) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=g)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=g)
    return x.to(device), y.to(device)


def mfu_case(fields: dict[str, Any], batch: int, device: torch.device, *, compile: bool,
             steps: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Tokens/s and MFU of one bf16 training step (bf16 autocast on CUDA, fp32 on CPU).

    Returns:
        ``tokens_per_s`` (median over ``steps`` timed steps), ``step_s``, ``first_step_s``
        (the compile time when compiling), ``mfu`` and ``mfu_nanogpt`` (None without a
        datasheet peak: CPUs), ``peak_flops``, the two FLOP counts per token.
    """
    cfg = ModelConfig(**fields)
    amp = torch.bfloat16 if device.type == "cuda" else None
    torch.manual_seed(0)
    model = build_model(cfg, device=device)
    forward = torch.compile(model) if compile else model
    opt = build_adamw(model, TrainConfig(lr=1e-4, steps=1), device)
    step = _step_fn(model, forward, opt, amp, device)
    x, y = _batch(cfg, batch, device)
    t0 = time.perf_counter()
    step(x, y)
    sync(device)
    first = time.perf_counter() - t0
    for _ in range(max(0, warmup - 1)):
        step(x, y)
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        step(x, y)
        sync(device)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    tokens_per_s = batch * cfg.seq_len / step_s
    exact, dense = flops_per_token(cfg, train=True), flops_per_token(cfg, train=True, dense=True)
    peak = peak_flops(device, amp)
    del model, forward, opt
    _free(device)
    return {"tokens_per_s": tokens_per_s, "step_s": step_s, "first_step_s": first,
            "batch": batch, "seq_len": cfg.seq_len, "n_params": sum_params(cfg),
            "flops_per_token": exact, "flops_per_token_nanogpt": dense,
            "peak_flops": peak,
            "mfu": exact * tokens_per_s / peak if peak else None,
            "mfu_nanogpt": dense * tokens_per_s / peak if peak else None}


def sum_params(cfg: ModelConfig) -> int:
    """Parameters of ``build_model(cfg)``, tied weights once (`sweep_models.cost.param_count`)."""
    return estimate(cfg, device="cpu").n_params


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def memory_case(overrides: dict[str, Any], batch: int, dtype: str,
                device: torch.device) -> dict[str, Any]:
    """The estimate of one training step against ``torch.cuda.max_memory_allocated`` (bytes).

    Raises:
        RuntimeError: Off CUDA (no allocator statistics).
    """
    if device.type != "cuda":
        raise RuntimeError("torch.cuda.max_memory_allocated needs a CUDA device")
    cfg = ModelConfig(**{**_MEM_BASE, **overrides})
    amp = torch.bfloat16 if dtype == "bf16" else None
    _free(device)
    torch.manual_seed(0)
    model = build_model(cfg, device=device)
    opt = build_adamw(model, TrainConfig(lr=1e-4, steps=1), device)
    step = _step_fn(model, model, opt, amp, device)
    x, y = _batch(cfg, batch, device)
    step(x, y)  # allocates the optimizer state
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    step(x, y)
    sync(device)
    measured = torch.cuda.max_memory_allocated(device)
    est = estimate(cfg, batch_size=batch, dtype=dtype, device="cuda").memory.total  # type: ignore[arg-type]
    del model, opt, step, x, y
    _free(device)
    return {"estimate_bytes": est, "measured_bytes": measured, "ratio": est / measured,
            "within_10pct": abs(est / measured - 1) <= 0.10,
            "within_5pct": abs(est / measured - 1) <= 0.05}


def _time_fwd_bwd(cfg: ModelConfig, batch: int, device: torch.device, steps: int) -> float:
    torch.manual_seed(0)
    net = build_model(cfg, device=device)
    x, y = _batch(cfg, batch, device)

    def run() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            _, loss = net(x, y)
        loss.backward()
        net.zero_grad(set_to_none=True)

    for _ in range(2):
        run()
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def flex_case(sparsities: tuple[float, ...], device: torch.device, *, seq_len: int = 8192,
              steps: int = 5) -> dict[str, Any]:
    """Forward + backward seconds of block-sparse FlexAttention models against dense FlexAttention.

    Long windows and a shallow, narrow model, so attention dominates the step. ``speedup``
    is dense / sparse time; ``flops_speedup`` the same ratio of the cost model's FLOPs, the
    most skipping the masked blocks can give.
    """
    base = {"vocab_size": 1024, "seq_len": seq_len, "d_model": 512, "n_heads": 8,
            "n_layers": 2, "attn_backend": "flex", "attn_block_size": 128}
    dense_cfg = ModelConfig(**base)
    dense_s = _time_fwd_bwd(dense_cfg, 2, device, steps)
    out: dict[str, Any] = {"seq_len": seq_len, "dense_s": dense_s}
    for s in sparsities:
        cfg = ModelConfig(**base, attn_pattern="block_sparse", attn_sparsity=s)
        _free(device)
        sparse_s = _time_fwd_bwd(cfg, 2, device, steps)
        out[f"sparsity_{s:g}"] = {
            "sparsity_realised": 1 - cfg.attn_layout.kept_pairs / dense_cfg.attn_layout.kept_pairs,
            "sparse_s": sparse_s, "speedup": dense_s / sparse_s,
            "flops_speedup": flops_per_token(dense_cfg) / flops_per_token(cfg)}
    return out
