"""The coordinate check of a parametrization: activation sizes across widths in the first steps.

Yang et al. 2022 ("Tensor Programs V", sec. 8 and Figure 5; microsoft/mup's ``coord_check``):
train the same model at several widths for a few steps on one fixed batch and record, at every
step, the mean absolute value of each layer's output (the "coordinate size", mup's ``l1``). Under
a parametrization where hyperparameters transfer (muP), each curve stays flat in width; under
the standard parametrization, the activations after a few Adam steps grow with width (the
update of a width-d matrix moves each output coordinate by Theta(d) times the learning rate),
which is why its best learning rate shrinks as the model widens.

The procedure is microsoft/mup's ``_get_coord_data`` (``fix_data=True``, one seed): step t
(1-based) records the forward pass after t - 1 optimizer steps, so t = 1 is the initialisation;
the optimizer is the trainer's own AdamW (`sweep.train.optim.build_adamw`, with the
parametrization's per-group rates) at a constant learning rate. Each width is built from the
same seed (mup seeds once before all widths, so its width 128 depends on whether 64 ran
first). Recorded: the token embedding's output (``embedding``; an encoder-decoder model's of the
source, and ``embedding.target`` of the target tokens), each block's output
(``block.<i>``; an encoder-decoder model's ``encoder.<i>`` then ``decoder.<i>``) and the output
logits (``logits``; of an encoder-decoder model, the decoder's over the target tokens, whose
loss is the one trained).

Widths change ``d_model`` with the head width, the MLP ratio and the query-per-key-value-head
ratio kept, as a size rule does (`width_config`); under ``mup`` the base width stays the given
config's (or, if it has none, the smallest width).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sweep.train.config import TrainConfig
from sweep.train.optim import build_adamw
from sweep_models import ModelConfig, build_model
from sweep_models.encoder_decoder import EncoderDecoder
from sweep_models.errors import ConfigError
from sweep_models.transformer import Transformer

__all__ = ["EMBEDDING", "EMBEDDING_TARGET", "LOGITS", "coord_data", "coord_figure",
           "log_width_slopes", "width_config"]

#: Module names of the records: the embedding output (an encoder-decoder model's of the source,
#: then of the target tokens) and the logits (blocks: ``block.<i>``).
EMBEDDING, EMBEDDING_TARGET, LOGITS = "embedding", "embedding.target", "logits"


def _blocks(model: Transformer | EncoderDecoder) -> list[tuple[str, torch.nn.Module]]:
    """``(record name, block)`` in forward order.

    ``block.<i>`` of a decoder-only model; ``encoder.<i>`` then ``decoder.<i>`` of an
    encoder-decoder one.
    """
    if isinstance(model, Transformer):
        return [(f"block.{i}", b) for i, b in enumerate(model.blocks)]
    return ([(f"encoder.{i}", b) for i, b in enumerate(model.encoder)]
            + [(f"decoder.{i}", b) for i, b in enumerate(model.decoder)])


def width_config(config: ModelConfig, width: int, parametrization: str | None = None,
                 base_d_model: int | None = None) -> ModelConfig:
    """``config`` at ``d_model = width``: head width, MLP ratio and head grouping kept.

    Args:
        config: The model at its own width.
        width: The new ``d_model``.
        parametrization: ``sp``, ``mup`` or ``completep``; None: the config's.
        base_d_model: The base width of ``mup``/``completep``; None: the config's.

    Returns:
        The config with ``d_model = width``, ``n_heads = width / d_head``, ``n_kv_heads``
        keeping ``n_heads / n_kv_heads``, ``d_ff = round(width * d_ff / d_model)``.

    Raises:
        ConfigError: ``width`` is not a multiple of the head width, or the grouped heads do not
            divide, naming ``width``.
    """
    # Both resolved on construction, so never None here.
    assert config.n_kv_heads is not None and config.d_ff is not None
    d_head = config.d_model // config.n_heads
    group = config.n_heads // config.n_kv_heads
    if width <= 0 or width % d_head or (width // d_head) % group:
        raise ConfigError(f"width={width}: must be a positive multiple of d_head * n_heads / "
                          f"n_kv_heads = {d_head * group} (the head width {d_head}, "
                          f"{group} query heads per key-value head)")
    n_heads = width // d_head
    changes: dict[str, Any] = {
        "d_model": width, "n_heads": n_heads, "n_kv_heads": n_heads // group,
        "d_ff": max(1, round(width * config.d_ff / config.d_model)),
        "parametrization": parametrization or config.parametrization,
    }
    if base_d_model is not None:
        changes["base_d_model"] = base_d_model
    return ModelConfig.from_dict({**config.to_dict(), **changes})


def _l1(records: list[dict], key: dict, tensor: torch.Tensor) -> None:
    records.append({**key, "l1": tensor.detach().abs().mean().item()})


def coord_data(config: ModelConfig, train: TrainConfig, batch: tuple[torch.Tensor, torch.Tensor],
               widths: Sequence[int], steps: int, *,
               parametrizations: Sequence[str] = ("sp", "mup"),
               base_d_model: int | None = None, device: str = "cpu") -> pd.DataFrame:
    """The coordinate sizes of ``config`` at each width, step and parametrization.

    Args:
        config: The model (its width is replaced by each of ``widths``, `width_config`).
        train: ``lr``, ``weight_decay``, ``betas``, ``grad_clip`` (0: none) and ``seed``; the
            learning rate stays constant (no schedule), as in microsoft/mup's check.
        batch: ``(x, y)`` token ids, each ``(B, T)``, T <= ``config.seq_len``; the same batch
            every step.
        widths: ``d_model`` values, each a multiple of the head width.
        steps: Forward passes recorded, >= 1 (step 1 at initialisation).
        parametrizations: Which to run.
        base_d_model: The base width of ``mup``/``completep``; None: the config's, else the
            smallest width.
        device: Torch device of the models.

    Returns:
        One row per (parametrization, width, module, t): columns ``parametrization``,
        ``width``, ``module`` (`EMBEDDING`, ``block.<i>``, `LOGITS`; an encoder-decoder
        model's `EMBEDDING`, `EMBEDDING_TARGET`, ``encoder.<i>``, ``decoder.<i>``, `LOGITS`),
        ``t`` (1 to ``steps``) and ``l1``, the mean absolute value of the module's output over
        batch, positions and features. A step whose loss is not finite ends that width's records.

    Raises:
        ConfigError: A width that does not fit the heads, ``steps`` < 1, or a base width the
            config refuses.
    """
    if steps < 1:
        raise ConfigError(f"steps={steps}: must be >= 1")
    base = base_d_model or config.base_d_model or min(widths)
    x, y = (t.to(device) for t in batch)
    records: list[dict] = []
    for par in parametrizations:
        for width in widths:
            cfg = width_config(config, width, par, base)
            torch.manual_seed(train.seed)
            model = build_model(cfg, device=device).train()
            optimizer = build_adamw(model, train, torch.device(device))
            for t in range(1, steps + 1):
                key = {"parametrization": par, "width": width, "t": t}
                # an encoder-decoder model embeds the source, then the target
                names = iter((EMBEDDING, EMBEDDING_TARGET))
                hooks = [model.wte.register_forward_hook(
                    lambda _m, _i, out, key=key, names=names: _l1(
                        records, {**key, "module": next(names)}, out))]
                hooks += [block.register_forward_hook(
                    lambda _m, _i, out, key=key, name=name: _l1(records, {**key, "module":
                                                                          name}, out))
                    for name, block in _blocks(model)]
                try:
                    # (B, T, V), or (B, T - src_len, V) for an encoder-decoder model, whose
                    # loss is over the target tokens only
                    logits, loss = model(x, y)
                finally:
                    for hook in hooks:
                        hook.remove()
                _l1(records, {**key, "module": LOGITS}, logits)
                if not math.isfinite(loss.item()):
                    break
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if train.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
                optimizer.step()
    return pd.DataFrame.from_records(records, columns=["parametrization", "width", "module",
                                                       "t", "l1"])


def log_width_slopes(frame: pd.DataFrame, *, module: str = LOGITS,
                     t: int | None = None) -> dict[str, float]:
    """The slope of log ``l1`` against log width, per parametrization: d log l1 / d log width.

    The least-squares line through (log width, log l1) of one module at one step; 0 is flat in
    width, 1 grows like the width. Under muP the coordinates stay Theta(1) (slope near 0); under
    SP a hidden activation or the logits after a few Adam steps grow like width^1 (Yang et al.
    2022, sec. 5 and Figure 5).

    Args:
        frame: `coord_data`'s records.
        module: Which module.
        t: Which step; None: the last one recorded.

    Returns:
        Parametrization -> slope (nan where fewer than two widths have a positive ``l1``).
    """
    rows = frame[frame["module"] == module]
    step = int(rows["t"].max()) if t is None else t
    out = {}
    for par, group in rows[rows["t"] == step].groupby("parametrization", sort=False):
        ok = group[group["l1"] > 0]
        out[str(par)] = (float(np.polyfit(np.log(ok["width"].to_numpy(float)),
                                          np.log(ok["l1"].to_numpy(float)), 1)[0])
                         if ok["width"].nunique() >= 2 else math.nan)
    return out


def coord_figure(frame: pd.DataFrame, path: Path | str | None = None) -> Any:
    """microsoft/mup's coord-check figure: one panel per step, l1 against width (log-log).

    One row of panels per parametrization, a line per module (embedding, blocks, logits);
    widths on a log2 axis. Drawn with the Agg backend unless pyplot is already in use.

    Args:
        frame: `coord_data`'s records.
        path: Where to save it as PNG; None: not saved.

    Returns:
        The ``matplotlib.figure.Figure``.

    Raises:
        OSError: The PNG cannot be written.
    """
    from sweep.plotting import pyplot

    plt = pyplot()

    pars = list(dict.fromkeys(frame["parametrization"]))
    steps = sorted(frame["t"].unique())
    modules = list(dict.fromkeys(frame["module"]))
    colours = [plt.get_cmap("viridis")(v) for v in np.linspace(0, 0.9, max(len(modules), 1))]
    fig, axes = plt.subplots(len(pars), len(steps), squeeze=False, sharey=True,
                             figsize=(2.6 * len(steps), 2.6 * len(pars) + 0.6))
    for row, par in enumerate(pars):
        for col, step in enumerate(steps):
            ax = axes[row][col]
            cut = frame[(frame["parametrization"] == par) & (frame["t"] == step)]
            for colour, module in zip(colours, modules, strict=True):
                line = cut[cut["module"] == module].sort_values("width")
                ax.plot(line["width"], line["l1"], marker="o", ms=3, color=colour, label=module)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{par}, t={step}", fontsize=9)
            if row == len(pars) - 1:
                ax.set_xlabel("width (d_model)")
            if col == 0:
                ax.set_ylabel("mean |activation|")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle("coordinate check (Yang et al. 2022, Figure 5): flat in width under muP",
                 fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
