"""``sweep estimate``: a model's parameters, FLOPs per token and training memory, unbuilt."""

from __future__ import annotations

import json
from typing import TypeVar, get_args

import typer

from sweep.cli import common
from sweep.cli.common import app, parse_sets, split_sets
from sweep.cli.estimate_table import estimate_table

_Choice = TypeVar("_Choice", bound=str)


def _choice(name: str, value: str, choices: tuple[_Choice, ...]) -> _Choice:
    """``value`` as the one of ``choices`` it is, typed as they are (a cost-model ``Literal``).

    Raises:
        ConfigError: ``name=value is not one of ...``, as `sweep_models.cost.estimate` says it.
    """
    from sweep_models.errors import check_choice

    check_choice(name, value, choices)
    return choices[choices.index(value)]


@app.command("estimate")
def estimate_cmd(
    preset: str = typer.Option("gpt2", help="Model preset to start from."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help="Override a model field (repeatable): FIELD=VALUE or "
                                        "model.FIELD=VALUE."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Sequences per step."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (<= the "
                                "config's seq_len; change that with --set seq_len=N)."),
    dtype: str = typer.Option("fp32", help="fp32, or bf16 (autocast, fp32 weights)."),
    optimizer: str = typer.Option("adamw", help="adamw, or sgd (with momentum)."),
    attn_backend: str = typer.Option(None, "--attn-backend",
                                     help="auto, sdpa, flex or math (default: the config's)."),
    device: str = typer.Option("auto", help="Whose kernels the estimate assumes: cuda, cpu, or "
                               "auto (cuda where this machine has a CUDA device, else cpu)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters, FLOPs per token and training memory of a model, without building it."""
    from sweep_models import ModelConfig
    from sweep_models import cost as cost_model
    from sweep_models.cost.memory import Device, Dtype, MemoryBackend, Optimizer

    overrides = split_sets(parse_sets(sets), ("model",))["model"]
    config = ModelConfig.from_preset(preset, **overrides)
    dtypes: tuple[Dtype, ...] = get_args(Dtype)
    optimizers: tuple[Optimizer, ...] = get_args(Optimizer)
    backends: tuple[MemoryBackend, ...] = get_args(MemoryBackend)
    devices: tuple[Device, ...] = get_args(Device)
    # checked in estimate's order, so the value refused first is the one estimate would refuse
    est = cost_model.estimate(
        config, batch_size=batch_size, seq_len=seq_len, dtype=_choice("dtype", dtype, dtypes),
        optimizer=_choice("optimizer", optimizer, optimizers),
        attn_backend=None if attn_backend is None else _choice("attn_backend", attn_backend,
                                                               backends),
        device=_choice("device", common.auto_device(_choice("device", device,
                                                             ("auto", *devices))), devices))
    if as_json:
        typer.echo(json.dumps({"preset": preset, "config": config.to_dict(), **est.to_dict()}))
        return
    title = " ".join([preset, *(f"{k}={v}" for k, v in overrides.items())])
    common.console.print(estimate_table(title, config, est))
    common.console.print(f"B={est.batch_size}, T={est.seq_len}, {est.dtype}, {est.optimizer}, "
                  f"attention backend {est.attn_backend} on {est.device}; memory total is the "
                  "peak of a steady-state training step"
                  + ("; a token is any token of the window, source or target"
                     if config.arch == "encoder_decoder" else ""), highlight=False)
