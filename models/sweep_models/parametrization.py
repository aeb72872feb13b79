"""The multipliers of a parametrization: standard (sp), muP and CompleteP, as pure arithmetic.

A parametrization says how initialisation, forward multipliers and per-parameter learning
rates change with the model's shape, so that hyperparameters tuned on a small base shape stay
good on a large one. It never changes a tensor's shape: parameter counts, FLOPs and memory
(`sweep_models.cost`) are the same under all three.

- ``sp``: GPT-2's initialisation (N(0, 0.02), residual output projections N(0, 0.02 /
  sqrt(2 L))), softmax scale 1 / sqrt(d_head), one learning rate for every parameter.
- ``mup``: the maximal update parametrization (Yang et al. 2022, "Tensor Programs V", Table 3
  and Appendix J; the microsoft/mup README's recipe, its ``MuReadout`` and ``MuAdamW``), with
  width_mult m_N = d_model / base_d_model. Every width of the base shape (d_model, d_ff, the
  heads' widths) is taken to scale by the same m_N, as in the paper's experiments.
- ``completep``: muP plus the depth rules of Dey et al. 2025 ("Don't be lazy: CompleteP
  enables compute-efficient deep transformers", Table 1; the reference implementation is
  EleutherAI's nanoGPT-mup ``completep`` branch), with depth_mult m_L = n_layers /
  base_n_layers and alpha = ``completep_alpha``.

Each parameter has a role (`ROLES`), given by `sweep_models.blocks.LanguageModel.param_roles`:

- ``embedding``: the token embedding (also the tied output projection) and a learned position
  table. A vector-like tensor in muP terms (one width dimension).
- ``readout``: the untied output projection Linear(d, V), vector-like too; its 1/m_N output
  multiplier is `output_mult`.
- ``hidden``: a block's matrix Linear(d, *) or Linear(*, d): the QKV and MLP input projections.
- ``hidden_out``: a block's residual output projections (attention and MLP ``c_proj``):
  hidden matrices whose standard initialisation is GPT-2's 0.02 / sqrt(2 L).
- ``hidden_vector``: a block's biases and norm weights and biases.
- ``final_norm``: the norm after the last block.

No torch import: the trainer and the cost model read these numbers without building anything.
"""

from __future__ import annotations

import math

from sweep_models.config import ModelConfig
from sweep_models.errors import required

__all__ = [
    "ADAMW_EPS",
    "INIT_STD",
    "ROLES",
    "adamw_eps",
    "attn_scale",
    "depth_mult",
    "init_std",
    "lr_mult",
    "output_mult",
    "residual_mult",
    "wd_mult",
    "width_mult",
]

#: Standard deviation of GPT-2's N(0, sigma) initialisation (Radford et al. 2019; nanoGPT).
INIT_STD = 0.02
#: torch.optim.AdamW's default epsilon, the base value CompleteP scales.
ADAMW_EPS = 1e-8
ROLES = ("embedding", "readout", "hidden", "hidden_out", "hidden_vector", "final_norm")
_HIDDEN_MATRICES = ("hidden", "hidden_out")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role={role!r} is not one of {', '.join(ROLES)}")


def width_mult(config: ModelConfig) -> float:
    """m_N = d_model / base_d_model under ``mup`` and ``completep``; 1 under ``sp``.

    Yang et al. 2022 (Tensor Programs V), sec. 3 and Table 3: the ratio of the model's width
    to the base width at which the hyperparameters were tuned.
    """
    if config.parametrization == "sp":
        return 1.0
    return config.d_model / required("base_d_model", config.base_d_model)


def depth_mult(config: ModelConfig) -> float:
    """m_L = n_layers / base_n_layers under ``completep``, else 1 (Dey et al. 2025, Table 1)."""
    if config.parametrization != "completep":
        return 1.0
    return config.n_layers / required("base_n_layers", config.base_n_layers)


def attn_scale(config: ModelConfig, attn_temperature: float | None = None) -> float:
    """The softmax scale of the attention logits Q K^T, the temperature tau folded in.

    ``sp``: 1 / (sqrt(d_head) * tau) (Vaswani et al. 2017, eq. 1). ``mup`` and ``completep``:
    1 / (d_head * tau), the 1/d attention of Yang et al. 2022 (Tensor Programs V, Appendix J
    and the microsoft/mup README: after training, queries and keys are correlated, so their
    dot product grows like d_head, not sqrt(d_head)).

    Args:
        config: The model.
        attn_temperature: tau; ``None``: ``config.attn_temperature``.
    """
    tau = config.attn_temperature if attn_temperature is None else attn_temperature
    q = config.d_head
    if config.parametrization == "sp":
        return 1.0 / (math.sqrt(q) * tau)
    return 1.0 / (q * tau)


def output_mult(config: ModelConfig) -> float:
    """The multiplier of the output logits: 1 / m_N (1 under ``sp``).

    Yang et al. 2022, Table 3 (output weights), in the equivalent ``MuReadout`` form of the
    microsoft/mup README: ``MuReadout.forward`` divides its input by ``width_mult``. With tied
    embeddings it is the shared-readout form (``MuSharedReadout``): the token embedding's
    matrix, multiplied by 1 / m_N on the way out only.
    """
    return 1.0 / width_mult(config)


def residual_mult(config: ModelConfig) -> float:
    """The multiplier of each residual branch, x + m * F(x): m_L^-alpha under ``completep``.

    Dey et al. 2025, Table 1 (residual branch multiplier (L / L_base)^-alpha, alpha = 1 for
    CompleteP, 0.5 the depth-muP it compares against; nanoGPT-mup ``completep``:
    ``1 / depth_multiplier ** depth_alpha_exp``); 1 under ``sp`` and ``mup``.
    """
    if config.parametrization != "completep":
        return 1.0
    return depth_mult(config) ** -config.completep_alpha


def init_std(config: ModelConfig, role: str) -> float:
    """The initialisation standard deviation of a parameter (weights; biases start at zero).

    ``sp``: 0.02, and 0.02 / sqrt(2 L) for ``hidden_out`` (GPT-2, Radford et al. 2019, sec.
    2.3). ``mup``: hidden matrices times m_N^-1/2 (Yang et al. 2022, Table 3: hidden weights'
    initial variance 1/fan_in; the microsoft/mup ``mup.init.normal_``, which scales the std of
    a matrix with two width dimensions by ``width_mult() ** -0.5``); embeddings and the readout
    keep 0.02 (vector-like, constant-variance init; the readout's 1/m_N is `output_mult`).
    ``completep``: as ``mup``, with the residual projections' depth factor fixed at the base
    depth, 0.02 / sqrt(2 L_base) * m_N^-1/2: the init does not change with depth, which
    `residual_mult` handles instead (Dey et al. 2025, Table 1; nanoGPT-mup ``completep``
    initialises every hidden matrix with init_std * m_N^-1/2 whatever the depth). Keeping the
    base depth's GPT-2 factor makes CompleteP at n_layers = base_n_layers exactly ``mup``.

    Args:
        config: The model.
        role: One of `ROLES` (module docstring).

    Raises:
        ValueError: For an unknown role.
    """
    _check_role(role)
    if role in ("hidden_vector", "final_norm"):
        return 0.0  # biases start at zero; norm gains at one (not a normal draw)
    std = INIT_STD
    if role == "hidden_out":
        depth = config.n_layers
        if config.parametrization == "completep":
            depth = required("base_n_layers", config.base_n_layers)
        std /= math.sqrt(2 * depth)
    if role in _HIDDEN_MATRICES:
        std *= width_mult(config) ** -0.5
    return std


def lr_mult(config: ModelConfig, role: str) -> float:
    """The factor of a parameter's AdamW learning rate over the base (tuned) learning rate.

    ``sp``: 1. ``mup``: 1 / m_N for hidden matrices, 1 for everything else (Yang et al. 2022,
    Table 3, Adam column: hidden weights' learning rate 1/fan_in, vector-like parameters
    constant; microsoft/mup ``MuAdam``: ``group['lr'] /= width_mult`` for tensors with two
    width dimensions). ``completep``: hidden matrices m_N^-1 * m_L^(alpha-1), the block's biases
    and norms m_L^(alpha-1), embeddings, readout and the final norm 1 (Dey et al. 2025, Table 1;
    nanoGPT-mup ``completep``: ``depth_lr_scaling = depth_multiplier ** (alpha - 1)``).

    Raises:
        ValueError: For an unknown role.
    """
    _check_role(role)
    mult = 1.0
    if role in _HIDDEN_MATRICES:
        mult /= width_mult(config)
    if config.parametrization == "completep" and role in (*_HIDDEN_MATRICES, "hidden_vector"):
        mult *= depth_mult(config) ** (config.completep_alpha - 1.0)
    return mult


def wd_mult(config: ModelConfig, role: str) -> float:
    """The factor of a decayed parameter's AdamW weight decay over the base weight decay.

    PyTorch's AdamW decays by lr * weight_decay per step (Loshchilov & Hutter 2019, Algorithm 2
    with the schedule multiplier folded into lr), so a hidden matrix whose lr is divided by m_N
    has its weight decay multiplied by m_N and keeps the base decay per step: microsoft/mup
    ``MuAdam`` (``group['weight_decay'] *= width_mult``) and nanoGPT-mup ``completep``
    (``weight_decay / width_lr_scaling``). Everything else: 1 (and parameters outside the decay
    group are not decayed at all).

    Raises:
        ValueError: For an unknown role.
    """
    _check_role(role)
    return width_mult(config) if role in _HIDDEN_MATRICES else 1.0


def adamw_eps(config: ModelConfig, eps: float = ADAMW_EPS) -> float:
    """AdamW's epsilon: ``eps`` under ``sp`` and ``mup``; eps * m_N^-1 * m_L^-alpha (``completep``).

    Dey et al. 2025, Table 1 (AdamW epsilon scaled with width and depth so it stays below the
    shrinking gradients; nanoGPT-mup ``completep``: ``adam_eps *= (1 / width_multiplier) *
    depth_multiplier ** -alpha``). microsoft/mup's ``MuAdamW`` leaves epsilon alone, and so
    does ``mup`` here.
    """
    if config.parametrization != "completep":
        return eps
    return eps / width_mult(config) * depth_mult(config) ** -config.completep_alpha
