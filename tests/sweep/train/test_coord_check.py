"""The coordinate check: the same numbers as microsoft/mup's loop, flat under muP, growing under SP.

Slope thresholds, d log l1 / d log width of the logits after 4 Adam steps (t = 5) at lr 1e-2,
widths 64 to 256, one batch of 8 x 64 bytes of the stdlib corpus: theory says 0 under muP
(every coordinate Theta(1)) and 1 under SP (Yang et al. 2022, sec. 5: an Adam update of a
width-d matrix moves each output coordinate by Theta(d) times the learning rate). Measured on
this batch: muP -0.03, SP +0.75. At these widths muP's slope still carries a finite-width term
of the initial logits, which shrink like width^-1/2 (the readout keeps std 0.02 under its
1 / width_mult multiplier: slope -0.48 at t = 1), fading as the updates take over; over five
batches of 4-8 sequences it stayed within [-0.3, +0.15] at t = 5 and SP within [0.42, 1.04],
the smaller batches the noisier. Thresholds: |muP| < 0.2 (flat to within the finite-width
term) and SP > 0.5 (halfway to its theoretical 1, above every muP value seen at t >= 4).
"""

import numpy as np
import pandas as pd
import pytest
import torch
from mup.coord_check import _get_coord_data

from sweep.data import load_corpus
from sweep.train.config import TrainConfig
from sweep.train.coord_check import (
    EMBEDDING,
    EMBEDDING_TARGET,
    LOGITS,
    coord_data,
    coord_figure,
    log_width_slopes,
    width_config,
)
from sweep.train.optim import build_adamw
from sweep_models import ConfigError, ModelConfig, build_model

WIDTHS = (64, 128, 256)
CONFIG = ModelConfig(vocab_size=128, seq_len=32, d_model=64, n_heads=4, n_layers=2,
                     base_d_model=64)
TRAIN = TrainConfig(lr=1e-2, weight_decay=0.0, grad_clip=0.0, steps=1)


def batch():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 128, (4, 32), generator=g),
            torch.randint(0, 128, (4, 32), generator=g))


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    corpus = load_corpus("builtin:python-stdlib", tmp_path_factory.mktemp("data"))
    x, y = corpus.train_batch(0, 0, 8, 64)
    config = CONFIG.replace(vocab_size=256, seq_len=64)
    return coord_data(config, TRAIN, (torch.from_numpy(x), torch.from_numpy(y)), WIDTHS, 5)


def test_records_every_module_step_width_and_parametrization(frame):
    assert len(frame) == 2 * len(WIDTHS) * 5 * (2 + CONFIG.n_layers)
    assert set(frame["module"]) == {EMBEDDING, "block.0", "block.1", LOGITS}
    assert (frame["l1"] > 0).all() and np.isfinite(frame["l1"]).all()
    # the same draws at the base width: sp and mup differ only in the 1/d attention there
    init = frame[(frame["t"] == 1) & (frame["width"] == 64)].set_index(
        ["parametrization", "module"])["l1"]
    assert init["sp"][EMBEDDING] == init["mup"][EMBEDDING]


def test_logits_flat_under_mup_and_growing_under_sp(frame):
    slopes = log_width_slopes(frame, module=LOGITS)
    assert abs(slopes["mup"]) < 0.2 and slopes["sp"] > 0.5, slopes
    # and the last block's output, which SP's fixed 0.02 init makes grow even at t = 1
    hidden = log_width_slopes(frame, module="block.1")
    assert abs(hidden["mup"]) < 0.2 and hidden["sp"] > 1.0, hidden


def test_the_same_numbers_as_the_mup_package_loop():
    """mup's ``_get_coord_data`` on our models and optimizer, one width at a time (it seeds
    once before all widths; we seed each width), gives every record we give."""
    ours = coord_data(CONFIG, TRAIN, batch(), WIDTHS, 3, parametrizations=("mup",))
    x, y = batch()
    names = {"wte": EMBEDDING, "blocks.0": "block.0", "blocks.1": "block.1", "lm_head": LOGITS}
    theirs = []
    for w in WIDTHS:
        df = _get_coord_data({w: lambda w=w: build_model(width_config(CONFIG, w, "mup"))},
                             [(x, y.reshape(-1))], lambda m: build_adamw(m, TRAIN,
                                                                         torch.device("cpu")),
                             nsteps=3, flatten_output=True, cuda=False, nseeds=1,
                             show_progress=False, filter_module_by_name=lambda n: n in names)
        theirs.append(df.assign(module=df["module"].map(names)))
    theirs = pd.concat(theirs).set_index(["width", "module", "t"])["l1"].sort_index()
    ours = ours.set_index(["width", "module", "t"])["l1"].sort_index()
    assert ours.index.equals(theirs.index) and len(ours) == 3 * 3 * 4
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), rtol=1e-6)


def test_width_config_keeps_head_width_mlp_ratio_and_grouping():
    cfg = ModelConfig(vocab_size=128, seq_len=32, d_model=64, n_heads=4, n_kv_heads=2,
                      d_ff=170, n_layers=1)
    wide = width_config(cfg, 256, "mup", 64)
    assert (wide.d_model, wide.n_heads, wide.n_kv_heads, wide.d_ff) == (256, 16, 8, 680)
    assert (wide.parametrization, wide.base_d_model) == ("mup", 64)
    with pytest.raises(ConfigError, match="width=40"):
        width_config(cfg, 40)  # d_head 16, 2 query heads per key-value head: multiples of 32


def test_figure_has_a_panel_per_step_and_parametrization(frame, tmp_path):
    fig = coord_figure(frame, tmp_path / "cc.png")
    assert len(fig.axes) == 2 * 5 and (tmp_path / "cc.png").stat().st_size > 0
    assert fig.axes[0].get_xscale() == "log"



def test_an_encoder_decoder_model_records_both_stacks_and_is_flat_under_mup(tmp_path):
    # Source then target in each window (synthetic:reverse); the logits are the decoder's over
    # the target tokens, the loss the one the trainer trains on.
    corpus = load_corpus("synthetic:reverse?vocab=12&length=5&seed=0&tokens=20000", tmp_path)
    x, y = corpus.train_batch(0, 0, 16, 10)
    config = ModelConfig(arch="encoder_decoder", vocab_size=12, seq_len=10, src_len=5,
                         d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2)
    frame = coord_data(config, TrainConfig(lr=3e-3, weight_decay=0.0, grad_clip=0.0, steps=1),
                       (torch.from_numpy(x), torch.from_numpy(y)), (32, 64, 128), 3)
    assert set(frame["module"]) == {EMBEDDING, EMBEDDING_TARGET, "encoder.0", "decoder.0",
                                    "decoder.1", LOGITS}
    assert len(frame) == 2 * 3 * 3 * 6  # parametrizations x widths x steps x modules
    slopes = log_width_slopes(frame, module=LOGITS)
    assert abs(slopes["mup"]) < 0.2 and slopes["sp"] > 0.5, slopes
