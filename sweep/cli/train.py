"""Commands on one config.

``sweep train`` (one trial, no study) and ``sweep estimate`` (the cost model).
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from sweep.cli import common
from sweep.cli.common import app, bad_input, parse_sets
from sweep.schema import TrialState


@app.command()
def train(
    preset: str = typer.Option("tiny", help="Model preset (models/presets.py)."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help="model.FIELD=VALUE or train.FIELD=VALUE (repeatable)."),
    data: str = typer.Option("builtin:python-stdlib", help="Corpus URI (see sweep.data)."),
    budget_tokens: float = typer.Option(None, help="Token budget (default 2e5 unless a train.* "
                                                   "budget is set)."),
    out: str = typer.Option("runs/train", help="Output folder; prepared corpora cached here."),
    device: str = typer.Option(None, help="Training device (default: CUDA when present)."),
    as_json: bool = typer.Option(False, "--json", help="End with the result as one JSON line."),
) -> None:
    """Train one trial and print its evaluations and result (debug a config before a sweep).

    Exits 0 when the trial completes, 1 when it diverges, 2 for bad input.
    """
    from models.errors import ConfigError
    from sweep.data import DataError
    from sweep.train.command import PrintReporter, TrainRequest, result_json

    try:
        request = TrainRequest(preset, parse_sets(sets), data, budget_tokens, out)
        request.check_fits(device)
        corpus = request.load()
        trainer = request.trainer(corpus, device)
    except (ConfigError, DataError, ValueError) as exc:
        bad_input(str(exc))
    lines = common.err_console if as_json else common.console
    lines.print(f"{request.model_config.n_layers} layers, d_model {request.model_config.d_model}"
                f", {trainer.n_params:,} params on {trainer.device}; {corpus.uri}: unigram "
                f"baseline {corpus.baseline_unigram_loss:.4f} nats/token"
                + (f", entropy rate {corpus.entropy_rate:.4f}" if corpus.entropy_rate else ""),
                highlight=False, soft_wrap=True)
    result = trainer.train(
        PrintReporter(lambda line: lines.print(line, highlight=False, soft_wrap=True)))
    summary = result_json(result, request, trainer)
    if as_json:
        print(json.dumps(summary))
    else:
        common.console.print(
            f"{result.state}: best val_loss {result.best_val_loss:.4f}, final "
            f"{result.final_val_loss:.4f} (unigram {result.baseline_unigram_loss:.4f}) after "
            f"{result.tokens:,} tokens, {result.steps} steps, {result.wall_s:.1f} s"
            + (f", MFU {result.mfu:.1%}" if result.mfu is not None else ""),
            highlight=False, soft_wrap=True)
    if result.state != TrialState.COMPLETE:
        common.err_console.print(f"[bold red]trial {result.state}[/]: {result.fail_reason}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


def _parametrization_rows(table: Table, config) -> None:
    """The parametrization and, for muP and CompleteP, its base shape (no cost depends on it)."""
    from models import parametrization

    name = config.parametrization
    if name == "completep":
        name += f", alpha {config.completep_alpha:g}"
    table.add_row("parametrization (costs as sp)", name)
    if config.parametrization != "sp":
        table.add_row("base d_model / width_mult",
                      f"{config.base_d_model} / {parametrization.width_mult(config):g}")
    if config.parametrization == "completep":
        table.add_row("base n_layers / depth_mult",
                      f"{config.base_n_layers} / {parametrization.depth_mult(config):g}")


def _encoder_decoder_rows(table: Table, config, attn: dict, seq_len: int) -> None:
    """The two stacks, the window's split and the pairs of each attention."""
    src = config.src_len
    table.add_row("layers: encoder + decoder",
                  f"{config.n_encoder_layers} + {config.n_decoder_layers}")
    table.add_row("tokens: source + target", f"{src} + {seq_len - src}")
    table.add_row("pairs: encoder / decoder / cross",
                  f"{attn['encoder_pairs']:,} / {attn['decoder_pairs']:,} / "
                  f"{attn['cross_pairs']:,}")


@app.command("estimate")
def estimate_cmd(
    preset: str = typer.Option("gpt2", help="Model preset to start from."),
    sets: list[str] = typer.Option(None, "--set", metavar="FIELD=VALUE",
                                   help="Override a model field (repeatable)."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Sequences per step."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (<= the "
                                "config's seq_len; change that with --set seq_len=N)."),
    dtype: str = typer.Option("fp32", help="fp32, or bf16 (autocast, fp32 weights)."),
    optimizer: str = typer.Option("adamw", help="adamw, or sgd (with momentum)."),
    attn_backend: str = typer.Option(None, "--attn-backend",
                                     help="auto, sdpa, flex or math (default: the config's)."),
    device: str = typer.Option("cuda", help="cuda or cpu: which kernels the estimate assumes."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters, FLOPs per token and training memory of a model, without building it."""
    from models import ConfigError, ModelConfig
    from models import cost as cost_model

    overrides = parse_sets(sets)
    try:
        config = ModelConfig.from_preset(preset, **overrides)
        est = cost_model.estimate(config, batch_size=batch_size, seq_len=seq_len, dtype=dtype,
                                  optimizer=optimizer, attn_backend=attn_backend, device=device)
    except ConfigError as exc:
        bad_input(str(exc))
    if as_json:
        typer.echo(json.dumps({"preset": preset, "config": config.to_dict(), **est.to_dict()}))
        return
    title = " ".join([preset, *(f"{k}={v}" for k, v in overrides.items())])
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
    common.console.print(table)
    common.console.print(f"B={est.batch_size}, T={est.seq_len}, {est.dtype}, {est.optimizer}, "
                  f"attention backend {est.attn_backend} on {est.device}; memory total is the "
                  "peak of a steady-state training step"
                  + ("; a token is any token of the window, source or target"
                     if config.arch == "encoder_decoder" else ""), highlight=False)
