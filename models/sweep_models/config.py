"""Model configuration: the one description of a transformer's shape that everything else reads.

`ModelConfig` is a frozen, keyword-only dataclass with the field's standard names. It is
validated once, on construction, and raises `ConfigError` naming the field and the rule that a
value breaks. It round-trips through a flat ``dict`` of plain values (for YAML and MLflow params).

The choices of the string fields live once, in the ``Literal`` aliases that annotate them
(``attn_pattern: AttnPattern``, as litgpt's ``Config``). Validation, the tuple constants
(``ATTN_PATTERNS`` ...) and `CHOICE_FIELDS` (field name -> allowed values, for validators of
other formats such as the study spec) are all read from those annotations.

No torch import here: the sweep validates and costs thousands of configs without building one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

from sweep_models import patterns
from sweep_models.errors import ConfigError, check_choice, reject_unknown, required

__all__ = [
    "ACTIVATIONS",
    "ARCHS",
    "ATTN_BACKENDS",
    "ATTN_PATTERNS",
    "CHOICE_FIELDS",
    "NORMS",
    "NORM_POSITIONS",
    "PARAMETRIZATIONS",
    "POS_ENCODINGS",
    "ENCODER_DECODER_FIELDS",
    "Activation",
    "Arch",
    "AttnBackend",
    "AttnPattern",
    "ConfigError",
    "ModelConfig",
    "Norm",
    "NormPosition",
    "Parametrization",
    "PosEncoding",
]

Arch = Literal["decoder_only", "encoder_decoder"]
AttnPattern = Literal["dense", "local", "strided", "block_sparse"]
AttnBackend = Literal["auto", "sdpa", "flex"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["pre", "post"]
Activation = Literal["relu", "gelu", "swiglu"]
PosEncoding = Literal["learned", "sinusoidal", "rope", "none"]
Parametrization = Literal["sp", "mup", "completep"]

ARCHS: tuple[str, ...] = get_args(Arch)
ATTN_PATTERNS: tuple[str, ...] = get_args(AttnPattern)
ATTN_BACKENDS: tuple[str, ...] = get_args(AttnBackend)
NORMS: tuple[str, ...] = get_args(Norm)
NORM_POSITIONS: tuple[str, ...] = get_args(NormPosition)
ACTIVATIONS: tuple[str, ...] = get_args(Activation)
POS_ENCODINGS: tuple[str, ...] = get_args(PosEncoding)
PARAMETRIZATIONS: tuple[str, ...] = get_args(Parametrization)
#: The fields of encoder-decoder models: left out of a decoder-only config's `to_dict`, so its
#: dict (MLflow params, checkpoint and trunk keys) is what it was before they existed.
ENCODER_DECODER_FIELDS = ("arch", "n_encoder_layers", "n_decoder_layers", "src_len")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape and options of a decoder-only, encoder or encoder-decoder model.

    Decoder-only: ``causal=True``; encoder: ``causal=False``; encoder-decoder:
    ``arch="encoder_decoder"``.

    Attributes:
        arch: ``decoder_only`` (the default: one stack of ``n_layers`` blocks, causal or not)
            or ``encoder_decoder`` (Vaswani et al. 2017, sec. 3.1 and 3.2.3: an encoder of
            bidirectional self-attention and FFN blocks over the source, and a decoder whose blocks
            are causal self-attention, cross-attention over the encoder output and the FFN, over the
            target). An encoder-decoder model reads each window of ``seq_len`` tokens as ``src_len``
            source tokens followed by ``tgt_len = seq_len - src_len`` decoder-input tokens, and its
            loss is on the target part only (`sweep_models.encoder_decoder`). It needs
            ``causal=True`` (the decoder's self-attention), ``attn_pattern="dense"`` and a
            parametrization other than ``completep`` (whose depth multiplier has one stack in mind).
        n_encoder_layers: Encoder blocks (``encoder_decoder`` only); ``None`` means
            ``n_layers``, resolved on construction: each stack has ``n_layers`` blocks unless
            given its own depth (Vaswani et al. 2017 use N = 6 for both). Must be unset
            (``None``) for ``decoder_only``.
        n_decoder_layers: Decoder blocks (``encoder_decoder`` only); ``None`` means
            ``n_layers``, as ``n_encoder_layers``.
        src_len: Source tokens S at the start of each window (``encoder_decoder`` only), in
            [1, seq_len - 1]; ``None`` means ``seq_len // 2``, resolved on construction. Must
            be unset for ``decoder_only``.
        vocab_size: Number of token ids V; logits have shape ``(B, T, V)``.
        seq_len: Context length T (also the size of a learned position table).
        d_model: Residual-stream width d.
        n_heads: Attention heads H; ``d_model`` must be divisible by it (head dim q = d / H).
        n_kv_heads: Key/value heads of grouped-query attention (Ainslie et al. 2023, "GQA"),
            each shared by ``n_heads / n_kv_heads`` query heads; ``n_heads`` must be divisible
            by it. ``1`` is multi-query attention (Shazeer 2019); ``None`` means ``n_heads``
            (multi-head attention, the fused QKV projection of shape ``(3d, d)``), resolved on
            construction as ``d_ff`` is; `replace` with another ``n_heads`` keeps it so.
        n_layers: Transformer blocks L of a decoder-only model; of an encoder-decoder model,
            the depth of each stack not given its own (``n_encoder_layers``,
            ``n_decoder_layers``).
        d_ff: Hidden width of the feed-forward block; ``None`` means ``4 * d_model``. With
            ``activation="swiglu"`` it is the width of each of the two input projections.
        attn_temperature: tau in softmax(Q K^T / (sqrt(q) * tau)); must be > 0.
        attn_pattern: ``dense``, ``local`` (causal sliding window), ``strided`` (Child et al.
            2019, fixed local + strided keys) or ``block_sparse`` (BigBird-style window, global
            and random blocks).
        attn_sparsity: Fraction of the causal (or, for encoders, all) query-key pairs the
            pattern removes, in [0, 1). The pattern's size (window, stride, blocks) is derived
            from it; see `attn_layout` for the derived size and the sparsity it achieves.
        attn_block_size: Block size for ``block_sparse`` and for FlexAttention block masks.
        attn_seed: Seed of the random blocks of ``block_sparse`` (fixed per model).
        attn_backend: ``sdpa`` (boolean-mask scaled_dot_product_attention), ``flex``
            (FlexAttention block masks that skip masked blocks) or ``auto`` (flex on CUDA for
            sparse patterns, sdpa otherwise).
        norm: ``layernorm`` or ``rmsnorm``.
        norm_position: ``pre`` (GPT-2, final norm after the last block) or ``post`` (original
            Transformer / BERT, no final norm).
        activation: ``relu``, ``gelu`` (tanh approximation, as GPT-2) or ``swiglu``.
        pos_encoding: ``learned``, ``sinusoidal``, ``rope`` or ``none``.
        rope_base: Base of the RoPE frequencies (Su et al. 2021).
        tie_embeddings: Share the token embedding with the output projection.
        bias: Biases in linear layers and LayerNorm.
        dropout: Dropout probability on embeddings, attention weights and residual branches.
        causal: Causal (decoder) or bidirectional (encoder) attention.
        norm_eps: Epsilon of the norm layers.
        parametrization: ``sp`` (standard: GPT-2's initialisation and one learning rate),
            ``mup`` (Yang et al. 2022, "Tensor Programs V": hyperparameters tuned at width
            ``base_d_model`` transfer across widths) or ``completep`` (Dey et al. 2025,
            "Don't be lazy: CompleteP": muP plus depth scaling of the residual branches, so
            they transfer across depths from ``base_n_layers`` too). The multipliers and their
            sources are in `sweep_models.parametrization`; shapes, parameter counts and FLOPs do
            not depend on it.
        base_d_model: The width the hyperparameters were tuned at (``mup``, ``completep``,
            which need it; ignored by ``sp``); width_mult = d_model / base_d_model.
        base_n_layers: The depth the hyperparameters were tuned at (``completep``, which
            needs it; ignored otherwise); depth_mult = n_layers / base_n_layers.
        completep_alpha: alpha in [0.5, 1] of the residual-branch multiplier
            depth_mult^-alpha (``completep``; 1 is CompleteP proper, 0.5 the depth-muP of
            Yang et al. 2023 and Bordelon et al. 2023).

    Raises:
        ConfigError: On construction, for any value that breaks a rule.
    """

    vocab_size: int = 256
    seq_len: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None
    n_layers: int = 2
    d_ff: int | None = None
    attn_temperature: float = 1.0
    attn_pattern: AttnPattern = "dense"
    attn_sparsity: float = 0.0
    attn_block_size: int = 64
    attn_seed: int = 0
    attn_backend: AttnBackend = "auto"
    norm: Norm = "layernorm"
    norm_position: NormPosition = "pre"
    activation: Activation = "gelu"
    pos_encoding: PosEncoding = "learned"
    rope_base: float = 10000.0
    tie_embeddings: bool = True
    bias: bool = True
    dropout: float = 0.0
    causal: bool = True
    norm_eps: float = 1e-5
    parametrization: Parametrization = "sp"
    base_d_model: int | None = None
    base_n_layers: int | None = None
    completep_alpha: float = 1.0
    arch: Arch = "decoder_only"
    n_encoder_layers: int | None = None
    n_decoder_layers: int | None = None
    src_len: int | None = None
    _layout: patterns.AttnLayout | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.arch == "encoder_decoder":
            for name, default in _STACK_DEFAULTS.items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, default(self))
        self._validate()
        layout = patterns.derive_layout(
            self.attn_pattern,
            self.attn_sparsity,
            self.seq_len,
            causal=self.causal,
            block_size=self.attn_block_size,
            seed=self.attn_seed,
        )
        object.__setattr__(self, "_layout", layout)

    def _validate(self) -> None:
        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        for name in ("vocab_size", "seq_len", "d_model", "n_heads", "n_kv_heads", "n_layers",
                     "d_ff", "attn_block_size"):
            v = getattr(self, name)
            if not is_int(v):
                raise ConfigError(f"{name}={v!r} must be an integer")
            if v <= 0:
                raise ConfigError(f"{name}={v} must be positive")
        if not is_int(self.attn_seed):
            raise ConfigError(f"attn_seed={self.attn_seed!r} must be an integer")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % required("n_kv_heads", self.n_kv_heads):
            raise ConfigError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads} "
                "(each key/value head serves the same number of query heads)"
            )
        if self.pos_encoding == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"pos_encoding='rope' needs an even head dimension; d_model/n_heads="
                f"{self.d_model // self.n_heads}"
            )
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ConfigError(
                f"pos_encoding='sinusoidal' needs an even d_model; got {self.d_model}"
            )
        for name, allowed in CHOICE_FIELDS.items():
            check_choice(name, getattr(self, name), allowed)
        for name in ("attn_temperature", "rope_base", "norm_eps"):
            v = getattr(self, name)
            if not is_num(v) or not v > 0 or v != v or v == float("inf"):
                raise ConfigError(f"{name}={v!r} must be a finite number > 0")
        if not is_num(self.attn_sparsity) or not 0.0 <= self.attn_sparsity < 1.0:
            raise ConfigError(f"attn_sparsity={self.attn_sparsity!r} must be in [0, 1)")
        if not is_num(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")
        for name in ("tie_embeddings", "bias", "causal"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ConfigError(f"{name}={v!r} must be true or false")
        self._validate_parametrization(is_int, is_num)
        self._validate_arch(is_int)

    def _validate_arch(self, is_int) -> None:
        if self.arch != "encoder_decoder":
            for name in ("n_encoder_layers", "n_decoder_layers", "src_len"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name}={getattr(self, name)!r} needs "
                                      "arch='encoder_decoder'")
            return
        for name in ("n_encoder_layers", "n_decoder_layers", "src_len"):
            v = getattr(self, name)
            if not is_int(v) or v <= 0:
                raise ConfigError(f"{name}={v!r} must be a positive integer")
        if required("src_len", self.src_len) >= self.seq_len:
            raise ConfigError(
                f"src_len={self.src_len} must be below seq_len={self.seq_len} (the window is "
                "src_len source tokens, then seq_len - src_len target tokens)"
            )
        if not self.causal:
            raise ConfigError("causal=False: arch='encoder_decoder' needs causal=True (the "
                              "decoder's self-attention is causal; the encoder's never is)")
        if self.attn_pattern != "dense":
            raise ConfigError(f"attn_pattern={self.attn_pattern!r}: arch='encoder_decoder' "
                              "supports only dense attention")
        if self.parametrization == "completep":
            raise ConfigError("parametrization='completep': arch='encoder_decoder' supports sp "
                              "and mup (CompleteP's depth multiplier is defined for one stack)")

    def _validate_parametrization(self, is_int, is_num) -> None:
        for name in ("base_d_model", "base_n_layers"):
            v = getattr(self, name)
            if v is not None and (not is_int(v) or v <= 0):
                raise ConfigError(f"{name}={v!r} must be a positive integer or null")
        alpha = self.completep_alpha
        if not is_num(alpha) or not 0.5 <= alpha <= 1.0:
            raise ConfigError(f"completep_alpha={alpha!r} must be in [0.5, 1]")
        if self.parametrization in ("mup", "completep") and self.base_d_model is None:
            raise ConfigError(
                f"parametrization={self.parametrization!r} needs base_d_model (the width the "
                "hyperparameters were tuned at)"
            )
        if self.parametrization == "completep" and self.base_n_layers is None:
            raise ConfigError(
                "parametrization='completep' needs base_n_layers (the depth the "
                "hyperparameters were tuned at)"
            )

    # ----------------------------------------------------------------- derived quantities
    @property
    def d_head(self) -> int:
        """Head dimension q = d_model / n_heads."""
        return self.d_model // self.n_heads

    @property
    def d_kv(self) -> int:
        """Width of the keys (and of the values): n_kv_heads * d_head; ``d_model`` for MHA."""
        return required("n_kv_heads", self.n_kv_heads) * self.d_head

    @property
    def tgt_len(self) -> int | None:
        """Target tokens seq_len - src_len of an encoder-decoder window; ``None`` otherwise."""
        return None if self.src_len is None else self.seq_len - self.src_len

    @property
    def attn_layout(self) -> patterns.AttnLayout:
        """The attention pattern's derived size and the sparsity it achieves."""
        assert self._layout is not None
        return self._layout

    # ------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Flat dict of plain values (str, int, float, bool; ``None`` for an unset base shape).

        A decoder-only config leaves out `ENCODER_DECODER_FIELDS` (all at their defaults), so
        its dict is the same as before encoder-decoder models existed. `from_dict` inverts it.
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        if self.arch == "decoder_only":
            for name in ENCODER_DECODER_FIELDS:
                del out[name]
        return out

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build a config from a flat dict, rejecting unknown keys.

        Raises:
            ConfigError: For an unknown key or an invalid value.
        """
        reject_unknown("model", values, cls.field_names())
        return cls(**values)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named preset (see `sweep_models.presets`) with some fields replaced.

        Presets leave ``d_ff`` unset where it is ``4 * d_model``, so overriding ``d_model``
        scales it too.

        Raises:
            ConfigError: For an unknown preset name, unknown field or invalid value.
        """
        from sweep_models.presets import preset_dict

        return cls.from_dict({**preset_dict(name), **overrides})

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again).

        A multi-head config stays multi-head: a new ``n_heads`` without a new ``n_kv_heads``
        moves ``n_kv_heads`` with it (a grouped-query config keeps its ``n_kv_heads``). So do
        an encoder-decoder model's defaults: a stack whose depth is ``n_layers`` follows a new
        ``n_layers``, and a ``src_len`` of ``seq_len // 2`` a new ``seq_len``. Changing
        ``arch`` to ``decoder_only`` drops the encoder-decoder fields.
        """
        values = self.to_dict()
        if "n_heads" in changes and "n_kv_heads" not in changes \
                and self.n_kv_heads == self.n_heads:
            values["n_kv_heads"] = None
        if self.arch == "encoder_decoder":
            for name, default in _STACK_DEFAULTS.items():
                if name not in changes and values[name] == default(self):
                    values[name] = None
            if changes.get("arch") == "decoder_only":
                for name in ENCODER_DECODER_FIELDS[1:]:
                    values.pop(name)
        return self.from_dict({**values, **changes})


#: The encoder-decoder fields resolved on construction when unset, with their defaults.
_STACK_DEFAULTS = {
    "n_encoder_layers": lambda c: c.n_layers,
    "n_decoder_layers": lambda c: c.n_layers,
    "src_len": lambda c: c.seq_len // 2,
}

#: Field name -> allowed values, for every field annotated with a ``Literal`` (field order).
CHOICE_FIELDS: dict[str, tuple[str, ...]] = {
    name: get_args(hint)
    for name, hint in get_type_hints(ModelConfig).items()
    if get_origin(hint) is Literal
}
