"""Our muP against the microsoft/mup package (``mup`` 1.0.0, in the test extra) on the same shapes.

- Learning rates and weight decays: ``mup.set_base_shapes`` (base width 64, delta 128) and
  ``mup.MuAdamW`` over the same two decay groups give every parameter the learning rate and
  weight decay our groups give it, to float rounding.
- Initialisation: by the same formula on the same parameter shapes (mup's ``constant_std_init_``:
  the std of a tensor with two width dimensions times ``infshape.width_mult() ** -0.5``, applied
  to each parameter's standard std), exactly; and statistically, the sample std of our
  initialised weights against that of ``mup.init.normal_`` drawing the same tensor anew.
- Coordinate check: ``mup.coord_check._get_coord_data`` (the loop behind ``get_coord_data``,
  which takes the optimizer as a function) on our muP model with our optimizer and on our SP
  model made muP by the package (``MuSharedReadout``/``MuReadout``, 1/d attention, base shapes,
  ``MuAdamW``), from the same draws (mup's init formula applied to them): the mean absolute
  activation of every module, at every step and width, agrees, and stays flat across widths.
"""

import math

import mup
import numpy as np
import pytest
import torch
from mup.coord_check import _get_coord_data

from sweep.train.config import TrainConfig
from sweep.train.optim import build_adamw, decay_groups
from sweep_models import ModelConfig, build_model
from sweep_models import parametrization as par

BASE, DELTA = 64, 128
LR, WD = 1e-2, 0.1


def config(width, parametrization="mup", **kw):
    return ModelConfig(**{"vocab_size": 128, "seq_len": 32, "d_model": width, "n_heads": 4,
                          "n_layers": 2, "parametrization": parametrization,
                          "base_d_model": BASE, **kw})


def base_shapes(**kw):
    """mup's base shapes from the base and delta widths (meta models: no RNG drawn)."""
    return mup.make_base_shapes(build_model(config(BASE, **kw), device="meta"),
                                build_model(config(DELTA, **kw), device="meta"))


def with_infshapes(model, **kw):
    # Our readout is a plain Linear with the 1/width_mult multiplier in front (MuReadout's
    # form), so mup's check that every width-to-vocab Linear is a MuReadout does not apply;
    # nothing is rescaled (biases start at 0, the readout keeps std 0.02).
    return mup.set_base_shapes(model, base_shapes(**kw), rescale_params=False, do_assert=False)


SHAPES = [{}, {"tie_embeddings": False, "activation": "swiglu"},
          {"n_kv_heads": 2, "bias": False, "norm": "rmsnorm"}]


@pytest.mark.parametrize("kw", SHAPES)
def test_learning_rates_and_weight_decays_match_mu_adamw(kw):
    train = TrainConfig(lr=LR, weight_decay=WD, steps=1)
    torch.manual_seed(0)
    model = with_infshapes(build_model(config(256, **kw)), **kw)
    ours = build_adamw(model, train, torch.device("cpu"))
    decay, no_decay = decay_groups(model)
    theirs = mup.MuAdamW([{"params": decay, "weight_decay": WD},
                          {"params": no_decay, "weight_decay": 0.0}], lr=LR)

    def per_parameter(optimizer):
        return {id(p): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups
                for p in g["params"]}

    ours, theirs = per_parameter(ours), per_parameter(theirs)
    assert ours.keys() == theirs.keys() == {id(p) for p in model.parameters()}
    names = {id(p): n for n, p in model.named_parameters()}
    for key, (lr, wd) in ours.items():
        assert lr == pytest.approx(theirs[key][0], rel=1e-12), names[key]
        assert wd == pytest.approx(theirs[key][1], rel=1e-12), names[key]
    # not vacuous: width_mult 4 splits the hidden matrices off at lr / 4 with decay 0.4
    assert (LR / 4, WD * 4) in theirs.values() and (LR, 0.0) in theirs.values()


@pytest.mark.parametrize("kw", SHAPES)
def test_init_std_is_mup_init_normal_on_the_same_shapes(kw):
    cfg = config(256, **kw)
    sp = ModelConfig(**{**cfg.to_dict(), "parametrization": "sp"})
    torch.manual_seed(0)
    model = with_infshapes(build_model(cfg), **kw)
    checked = 0
    for name, p, role in model.param_roles():
        sp_std = par.init_std(sp, role)
        if sp_std == 0.0:
            continue  # biases (zero) and norm gains (one): not drawn
        # the same formula: mup.init.constant_std_init_
        scale = p.infshape.width_mult() ** -0.5 if p.infshape.ninf() == 2 else 1.0
        assert par.init_std(cfg, role) == pytest.approx(sp_std * scale, rel=1e-12), name
        # statistically: our draw against mup.init.normal_'s, each a sample std of n draws
        # (relative standard error 1 / sqrt(2n), of their ratio 1 / sqrt(n))
        theirs = torch.empty_like(p)
        theirs.infshape = p.infshape
        mup.init.normal_(theirs, std=sp_std)
        ratio = p.detach().std().item() / theirs.std().item()
        assert ratio == pytest.approx(1.0, abs=6 / math.sqrt(p.numel())), name
        checked += scale != 1.0
    assert checked >= 8  # the hidden matrices of both blocks were compared


# ------------------------------------------------------------------------ coordinate check
WIDTHS = (64, 128, 256)
MODULES = ("wte", "blocks.0.attn", "blocks.0.mlp", "blocks.1", "ln_f", "lm_head")


def _package_mup(width, tie):
    """Our SP model of ``width`` made muP by the mup package, from the SP model's draws."""
    model = build_model(config(width, "sp", tie_embeddings=tie))
    # built on meta: their own initialisation would draw from the RNG, then be replaced
    if tie:
        model.lm_head = mup.MuSharedReadout(model.wte.weight, bias=False, device="meta")
    else:
        weight = model.lm_head.weight
        model.lm_head = mup.MuReadout(width, 128, bias=False, device="meta")
        model.lm_head.weight = weight
    for block in model.blocks:
        block.attn.scale = 1.0 / block.attn.d_head  # muP's 1/d attention
    mup.set_base_shapes(model, base_shapes(tie_embeddings=tie), rescale_params=False)
    with torch.no_grad():  # mup.init.normal_'s scale, on the SP draws of the same seed
        for p in model.parameters():
            if p.infshape.ninf() == 2:
                p.mul_(p.infshape.width_mult() ** -0.5)
    return model


def _coords(models, optimizer):
    torch.manual_seed(0)
    x, y = torch.randint(0, 128, (8, 32)), torch.randint(0, 128, (8, 32))
    df = _get_coord_data(models, [(x, y.reshape(-1))], optimizer, nsteps=3,
                         flatten_output=True, cuda=False, nseeds=1, show_progress=False,
                         filter_module_by_name=lambda name: name in MODULES)
    return df.set_index(["module", "width", "t"])["l1"].sort_index()


@pytest.mark.parametrize("tie", [True, False])
def test_coord_check_agrees_with_the_mup_package(tie):
    train = TrainConfig(lr=LR, weight_decay=0.0, betas=(0.9, 0.95), steps=1)
    ours = _coords({w: (lambda w=w: build_model(config(w, tie_embeddings=tie)))
                    for w in WIDTHS},
                   lambda model: build_adamw(model, train, torch.device("cpu")))

    def mu_adamw(model):
        decay, no_decay = decay_groups(model)
        return mup.MuAdamW([{"params": decay}, {"params": no_decay}], lr=LR,
                           betas=(0.9, 0.95), weight_decay=0.0)

    theirs = _coords({w: (lambda w=w: _package_mup(w, tie)) for w in WIDTHS}, mu_adamw)
    assert ours.index.equals(theirs.index) and len(ours) == len(MODULES) * len(WIDTHS) * 3
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), rtol=1e-5)

    # and it is muP: a hidden activation's size after 3 steps stays flat in width, where SP's
    # grows faster than the width (slopes in log-log about -0.2 and 1.4)
    def slope(coords):
        last = coords.xs(3, level="t").xs("blocks.1", level="module")
        return np.polyfit(np.log(list(WIDTHS)), np.log(last.to_numpy()), 1)[0]

    sp = _coords({w: (lambda w=w: build_model(config(w, "sp", tie_embeddings=tie)))
                  for w in WIDTHS},
                 lambda model: build_adamw(model, train, torch.device("cpu")))
    assert abs(slope(ours)) < 0.3 and slope(sp) > 1.0, (slope(ours), slope(sp))
