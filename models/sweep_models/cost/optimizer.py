"""The optimizer step's temporaries, for the optimizers the trainer builds (bytes, elements).

`sweep.train.optim.build_adamw`: AdamW ``foreach`` on CPU, whose step allocates
``torch._foreach_sqrt(exp_avg_sqs)``, one temporary the size of the parameter group it updates,
group by group (torch ``_multi_tensor_adamw``); ``fused`` on CUDA, in place. SGD (with momentum)
as torch runs it by default: one tensor at a time on CPU, ``foreach`` on CUDA.
"""

from __future__ import annotations

from sweep_models import parametrization
from sweep_models.config import ModelConfig
from sweep_models.cost.params import param_count, position_rows, qkv_width, role_param_counts
from sweep_models.errors import required

__all__ = ["largest_param", "largest_update_group", "update_temp_bytes"]

FP32_BYTES = 4
# The roles AdamW decays: every nn.Linear weight (`sweep.train.optim.decay_groups`).
_DECAYED_ROLES = ("readout", "hidden", "hidden_out")


def largest_update_group(config: ModelConfig) -> int:
    """Elements of the trainer's largest AdamW parameter group (`sweep.train.optim.param_groups`).

    Groups are keyed by (decayed, lr multiplier, weight-decay multiplier) of each role
    (`sweep_models.parametrization`): under ``sp`` the decayed matrices and the rest; muP and
    CompleteP split them further.
    """
    groups: dict[tuple[bool, float, float], int] = {}
    for role, n in role_param_counts(config).items():
        decayed = role in _DECAYED_ROLES
        key = (decayed, parametrization.lr_mult(config, role),
               parametrization.wd_mult(config, role) if decayed else 0.0)
        groups[key] = groups.get(key, 0) + n
    return max(groups.values())


def largest_param(config: ModelConfig) -> int:
    """Elements of the model's largest parameter tensor."""
    d = config.d_model
    # a cross-attention's Linear(d, 2 d_kv) is always below the QKV's Linear(d, d + 2 d_kv)
    return max(config.vocab_size * d, d * qkv_width(config), d * required("d_ff", config.d_ff),
               position_rows(config) * d if config.pos_encoding == "learned" else 0)


def update_temp_bytes(config: ModelConfig, optimizer: str, device: str) -> int:
    """Bytes of the temporaries an optimizer step of ``optimizer`` on ``device`` holds at once.

    ``adamw``: none on CUDA (fused), the largest group on CPU (foreach). ``sgd``: its decayed
    gradient, the largest parameter on CPU, every parameter on CUDA.
    """
    if optimizer == "adamw":
        return 0 if device == "cuda" else FP32_BYTES * largest_update_group(config)
    if device == "cpu":
        return FP32_BYTES * largest_param(config)
    return FP32_BYTES * param_count(config)
