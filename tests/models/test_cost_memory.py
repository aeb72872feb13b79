"""Training memory estimate against the measured peak of a real training step.

CPU: a dispatch mode tracks every live tensor storage (weak-reference finalizers free them), so
the peak is exactly what PyTorch keeps alive, without allocator noise. CUDA (gpu marker):
``torch.cuda.max_memory_allocated``. AdamW is the trainer's own (`sweep.train.optim.build_adamw`:
``foreach`` on CPU, ``fused`` on CUDA) and the step clips the gradient as the trainer does.
"""

import contextlib
import gc
import weakref

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from sweep.train.config import TrainConfig
from sweep.train.optim import build_adamw
from sweep_models import ModelConfig, build_model
from sweep_models.cost import estimate
from sweep_models.cost.optimizer import largest_update_group


class LiveStorageTracker(TorchDispatchMode):
    """Peak bytes of tensor storages alive at once, counting each storage once."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._bytes = {}

    def track(self, tensor):
        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._bytes:
            return
        self._bytes[key] = storage.nbytes()
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key)

    def _free(self, key):
        self.live -= self._bytes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


def _optimizer(model, name):
    if name == "adamw":
        device = next(model.parameters()).device
        return build_adamw(model, TrainConfig(lr=1e-3, weight_decay=0.1, steps=1), device)
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=0.1)


def _train_step(model, opt, x, y, bf16=False):
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def measured_cpu_peak(cfg, batch_size, seq_len, optimizer="adamw", math=False, bf16=False):
    """Peak live bytes of the second (steady-state) training step on CPU."""
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = _optimizer(model, optimizer)
    x = torch.randint(0, cfg.vocab_size, (batch_size, seq_len))
    y = torch.randint(0, cfg.vocab_size, (batch_size, seq_len))
    _train_step(model, opt, x, y, bf16)  # allocates the optimizer state
    gc.collect()
    tracker = LiveStorageTracker()
    for t in [*model.parameters(), *model.buffers(), x, y]:
        tracker.track(t)
    for state in opt.state.values():
        for t in state.values():
            tracker.track(t)
    kernel = sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()
    with kernel, tracker:
        _train_step(model, opt, x, y, bf16)
    return tracker.peak


# Differ in batch size, sequence length, width, depth and vocabulary, and in the options that
# change what is saved for backward.
CPU_CASES = [
    ({}, 8, 128, "adamw"),
    ({}, 2, 128, "adamw"),
    ({"vocab_size": 2048}, 4, 128, "adamw"),
    ({"d_model": 256, "n_heads": 8}, 4, 128, "adamw"),
    ({"seq_len": 512}, 2, 512, "adamw"),
    ({"seq_len": 512}, 2, 200, "adamw"),
    ({"d_model": 256, "vocab_size": 64, "n_layers": 3}, 2, 256, "adamw"),
    ({"d_model": 512, "n_heads": 8, "vocab_size": 64, "seq_len": 32}, 1, 32, "adamw"),
    ({"norm": "rmsnorm", "activation": "swiglu", "pos_encoding": "rope", "bias": False},
     4, 128, "adamw"),
    ({"activation": "relu", "norm_position": "post"}, 4, 128, "adamw"),
    ({"pos_encoding": "sinusoidal", "tie_embeddings": False, "causal": False}, 4, 128, "adamw"),
    ({"attn_pattern": "local", "attn_sparsity": 0.5}, 4, 128, "adamw"),
    ({"attn_pattern": "block_sparse", "attn_sparsity": 0.4, "attn_block_size": 16,
      "seq_len": 256}, 4, 256, "adamw"),
    ({"dropout": 0.1}, 4, 128, "adamw"),  # CPU: attention dropout runs SDPA's math path
    ({"vocab_size": 64, "seq_len": 256}, 4, 256, "sgd"),
    # the optimizer step is the peak: foreach AdamW's temporary the size of its largest group
    ({"d_model": 512, "n_heads": 8, "vocab_size": 64, "seq_len": 32}, 1, 32, "adamw"),
    ({"parametrization": "completep", "base_d_model": 64, "base_n_layers": 1,
      "completep_alpha": 0.5}, 1, 128, "adamw"),
    # a tied token table's two gradients summed at the end of backward
    ({"vocab_size": 8192, "seq_len": 64, "d_model": 256, "n_heads": 1, "n_layers": 1,
      "activation": "swiglu", "pos_encoding": "rope", "bias": False}, 1, 64, "adamw"),
]


@pytest.mark.parametrize("overrides,batch_size,seq_len,optimizer", CPU_CASES)
def test_memory_estimate_matches_measured_cpu_peak(overrides, batch_size, seq_len, optimizer):
    cfg = ModelConfig(**{"vocab_size": 256, "seq_len": seq_len, "d_model": 128, "n_heads": 4,
                         "n_layers": 2, **overrides})
    measured = measured_cpu_peak(cfg, batch_size, seq_len, optimizer)
    est = estimate(cfg, batch_size=batch_size, seq_len=seq_len, optimizer=optimizer,
                   device="cpu").memory.total
    assert 0.95 <= est / measured <= 1.05, (est, measured)


def test_math_backend_estimate_matches_measured_peak():
    # Forced unfused attention stores the (B, H, T, T) scores; the estimate must know it.
    cfg = ModelConfig(vocab_size=64, seq_len=256, d_model=128, n_heads=4, n_layers=2)
    measured = measured_cpu_peak(cfg, 4, 256, math=True)
    est = estimate(cfg, batch_size=4, attn_backend="math", device="cpu").memory.total
    fused = estimate(cfg, batch_size=4, attn_backend="sdpa", device="cpu").memory.total
    assert 0.95 <= est / measured <= 1.05, (est, measured)
    assert fused / measured < 0.85  # the fused-kernel estimate would be wrong here


@pytest.mark.parametrize("overrides,batch_size", [
    ({}, 8),
    ({"vocab_size": 2048}, 4),
    ({"d_model": 256, "n_heads": 8, "activation": "swiglu", "norm": "rmsnorm"}, 4),
])
def test_bf16_autocast_estimate_matches_measured_cpu_peak(overrides, batch_size):
    # bf16 matmuls with fp32 weights, norms and residual stream, as the trainer on CUDA.
    cfg = ModelConfig(**{"vocab_size": 256, "seq_len": 128, "d_model": 128, "n_heads": 4,
                         "n_layers": 2, **overrides})
    measured = measured_cpu_peak(cfg, batch_size, 128, bf16=True)
    est = estimate(cfg, batch_size=batch_size, dtype="bf16", device="cpu").memory.total
    assert 0.95 <= est / measured <= 1.05, (est, measured)


CUDA_CASES = [
    ({"vocab_size": 32768, "seq_len": 512, "d_model": 1024, "n_heads": 16, "n_layers": 4},
     8, "fp32"),
    ({"vocab_size": 32768, "seq_len": 512, "d_model": 1024, "n_heads": 16, "n_layers": 4},
     8, "bf16"),
    ({"vocab_size": 8192, "seq_len": 1024, "d_model": 768, "n_heads": 12, "n_layers": 6,
      "attn_pattern": "local", "attn_sparsity": 0.5, "attn_backend": "sdpa"}, 8, "bf16"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("overrides,batch_size,dtype", CUDA_CASES)
def test_memory_estimate_matches_cuda_max_memory_allocated(overrides, batch_size, dtype):
    cfg = ModelConfig(**overrides)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model(cfg, device=device)
    opt = _optimizer(model, "adamw")
    x = torch.randint(0, cfg.vocab_size, (batch_size, cfg.seq_len), device=device)
    y = torch.randint(0, cfg.vocab_size, (batch_size, cfg.seq_len), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    est = estimate(cfg, batch_size=batch_size, dtype=dtype, device="cuda").memory.total
    assert 0.95 <= est / measured <= 1.05, (est, measured)


@pytest.mark.parametrize("overrides", [
    {},
    {"tie_embeddings": False},
    {"parametrization": "mup", "base_d_model": 32},
    {"parametrization": "mup", "base_d_model": 64},  # width multiplier 1: groups merge
    {"parametrization": "completep", "base_d_model": 32, "base_n_layers": 1,
     "completep_alpha": 0.5, "tie_embeddings": False},
    {"arch": "encoder_decoder", "n_encoder_layers": 1, "n_decoder_layers": 2, "src_len": 16},
])
def test_largest_update_group_is_the_trainers_largest_adamw_group(overrides):
    cfg = ModelConfig(**{"vocab_size": 100, "seq_len": 32, "d_model": 64, "n_heads": 4,
                         "n_layers": 2, **overrides})
    opt = _optimizer(build_model(cfg, device="meta"), "adamw")
    sizes = [sum(p.numel() for p in group["params"]) for group in opt.param_groups]
    assert largest_update_group(cfg) == max(sizes)
