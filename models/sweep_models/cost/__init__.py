"""Analytic cost model: parameters, FLOPs per token and training memory of a `ModelConfig`.

Pure arithmetic on the config (no torch import), a few microseconds per config, so a sweep can
filter thousands of candidate shapes before building any of them. The counts follow the modules
of `sweep_models.transformer` exactly; the tests check them against the built module's ``numel``,
``torch.utils.flop_counter.FlopCounterMode`` and a measured training-step peak.

- `sweep_models.cost.params`: parameter counts; Kaplan et al. 2020's non-embedding N.
- `sweep_models.cost.flops`: FLOPs per token, exact over the query-key pairs a mask keeps, and the
  nanoGPT/PaLM dense convention (Chowdhery et al. 2022, appendix B).
- `sweep_models.cost.memory`: the memory of one training step, derived op by op.
- `sweep_models.cost.summary`: `estimate`, all of them for one config and step shape.

Notation: V vocab, T sequence length, d = d_model, L layers, H heads, q = d / H, f = d_ff,
B batch size.
"""

from sweep_models.cost.flops import attention_pairs, flops_per_token
from sweep_models.cost.memory import DEVICES, DTYPES, MEMORY_BACKENDS, OPTIMIZERS, MemoryEstimate
from sweep_models.cost.params import non_embedding_param_count, param_count
from sweep_models.cost.summary import CostEstimate, estimate

__all__ = [
    "DEVICES",
    "DTYPES",
    "MEMORY_BACKENDS",
    "OPTIMIZERS",
    "CostEstimate",
    "MemoryEstimate",
    "attention_pairs",
    "estimate",
    "flops_per_token",
    "non_embedding_param_count",
    "param_count",
]
