"""The table ``sweep estimate`` prints: a model's parameters, FLOPs per token and memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from sweep_models import ModelConfig
    from sweep_models.cost import CostEstimate

__all__ = ["estimate_table"]


def estimate_table(title: str, config: ModelConfig, est: CostEstimate) -> Table:
    """`sweep_models.cost.estimate`'s figures for ``config``: counts, FLOPs, attention, memory.

    Memory in GiB, MiB or KiB as it is large; FLOPs per token of the kept pairs and of the
    dense convention.
    """
    from rich.table import Table

    table = Table("quantity", "value", title=title)
    table.add_row("parameters", f"{est.n_params:,}")
    table.add_row("non-embedding parameters", f"{est.n_params_non_embedding:,}")
    table.add_row("FLOPs/token forward (kept pairs)", f"{est.flops_per_token_fwd:,.0f}")
    table.add_row("FLOPs/token train (kept pairs)", f"{est.flops_per_token_train:,.0f}")
    dense = "all pairs" if config.arch == "encoder_decoder" else "6N + 12LHqT"
    table.add_row(f"FLOPs/token train (dense, {dense})",
                  f"{est.flops_per_token_dense_train:,.0f}")
    heads = f"{config.n_heads} / {config.n_kv_heads}"
    if config.n_kv_heads != config.n_heads:
        heads += " (multi-query)" if config.n_kv_heads == 1 else " (grouped-query)"
    table.add_row("heads: query / key-value", heads)
    _parametrization_rows(table, config)
    attn = est.attn_layout
    if config.arch == "encoder_decoder":
        _encoder_decoder_rows(table, config, attn, est.seq_len)
    size = ", ".join(f"{k}={attn[k]}" for k in ("window", "stride", "block_size",
                                                 "n_window_blocks", "n_global_blocks",
                                                 "n_random_blocks") if k in attn)
    table.add_row("attention", f"{attn['pattern']} {size}".strip())
    table.add_row("attention sparsity (achieved / asked)",
                  f"{attn['sparsity']:.4f} / {attn['requested_sparsity']:.4f}")
    table.add_section()
    for name, value in est.memory.to_dict().items():
        table.add_row(f"memory: {name}", _format_bytes(value))
    return table


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


def _parametrization_rows(table: Table, config: ModelConfig) -> None:
    """The parametrization and, for muP and CompleteP, its base shape (no cost depends on it)."""
    from sweep_models import parametrization

    name: str = config.parametrization
    if name == "completep":
        name += f", alpha {config.completep_alpha:g}"
    table.add_row("parametrization (costs as sp)", name)
    if config.parametrization != "sp":
        table.add_row("base d_model / width_mult",
                      f"{config.base_d_model} / {parametrization.width_mult(config):g}")
    if config.parametrization == "completep":
        table.add_row("base n_layers / depth_mult",
                      f"{config.base_n_layers} / {parametrization.depth_mult(config):g}")


def _encoder_decoder_rows(table: Table, config: ModelConfig, attn: dict[str, Any],
                          seq_len: int) -> None:
    """The two stacks, the window's split and the pairs of each attention."""
    from sweep_models.errors import required

    src = required("src_len", config.src_len)
    table.add_row("layers: encoder + decoder",
                  f"{config.n_encoder_layers} + {config.n_decoder_layers}")
    table.add_row("tokens: source + target", f"{src} + {seq_len - src}")
    table.add_row("pairs: encoder / decoder / cross",
                  f"{attn['encoder_pairs']:,} / {attn['decoder_pairs']:,} / "
                  f"{attn['cross_pairs']:,}")
