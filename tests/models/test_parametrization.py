"""muP and CompleteP in the factory: the forward multipliers against an SP model with the same
weights, the initialisation against each role's standard deviation, the base shape against SP,
and the cost model unchanged by the parametrization."""

import math

import pytest
import torch
from torch import nn

from sweep_models import ModelConfig, build_model
from sweep_models import parametrization as par
from sweep_models.cost import estimate

SHAPE = {"vocab_size": 96, "seq_len": 16, "d_model": 64, "n_heads": 4, "n_layers": 4}


def mup(**kw):
    return ModelConfig(**{**SHAPE, "parametrization": "mup", "base_d_model": 16, **kw})


def completep(**kw):
    return ModelConfig(**{**SHAPE, "parametrization": "completep", "base_d_model": 16,
                          "base_n_layers": 1, **kw})


@pytest.mark.parametrize("shape", [{}, {"n_kv_heads": 2, "activation": "swiglu"},
                                   {"attn_pattern": "local", "attn_sparsity": 0.5,
                                    "tie_embeddings": False, "pos_encoding": "rope"}])
def test_cost_model_is_the_same_under_every_parametrization(shape):
    sp = ModelConfig(**SHAPE, **shape)
    for other in (mup(**shape), completep(**shape), completep(completep_alpha=0.5, **shape)):
        for kwargs in ({}, {"batch_size": 8, "dtype": "bf16", "device": "cpu"}):
            assert estimate(other, **kwargs) == estimate(sp, **kwargs)


def test_sp_has_no_multipliers():
    cfg = ModelConfig(**SHAPE, attn_temperature=2.0)
    model = build_model(cfg, device="meta")
    assert isinstance(model.readout_scale, nn.Identity)
    assert all(isinstance(b.branch_scale, nn.Identity) for b in model.blocks)
    assert model.blocks[0].attn.scale == 1 / (math.sqrt(16) * 2.0)
    assert {par.lr_mult(cfg, r) for r in par.ROLES} == {1.0}
    assert par.adamw_eps(cfg) == 1e-8


@pytest.mark.parametrize("tie", [True, False])
def test_mup_forward_is_sp_with_one_over_d_attention_and_logits_over_width_mult(tie):
    # Same weights in an SP model: only the attention scale (1/d_head instead of
    # 1/sqrt(d_head), times 1/tau) and the readout's 1/width_mult differ.
    cfg = mup(tie_embeddings=tie, attn_temperature=0.5)
    torch.manual_seed(0)
    model = build_model(cfg)
    sp = build_model(ModelConfig(**{**cfg.to_dict(), "parametrization": "sp"}))
    sp.load_state_dict(model.state_dict())
    for block in sp.blocks:
        block.attn.scale = 1 / (16 * 0.5)
    assert model.blocks[0].attn.scale == 1 / (16 * 0.5)
    idx = torch.randint(0, 96, (2, 16))
    torch.testing.assert_close(model(idx), sp(idx) / 4.0, rtol=1e-5, atol=1e-7)
    model.set_attn_temperature(2.0)  # PBT's live change keeps the 1/d form
    assert model.blocks[1].attn.scale == 1 / (16 * 2.0)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_completep_forward_is_mup_with_residual_branches_times_depth_mult_to_minus_alpha(
        norm_position):
    cfg = completep(completep_alpha=0.5, norm_position=norm_position)
    m = (4 / 1) ** -0.5
    assert par.residual_mult(cfg) == m
    torch.manual_seed(0)
    model = build_model(cfg)
    ref = build_model(ModelConfig(**{**cfg.to_dict(), "parametrization": "mup"}))
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():  # m * c_proj(y) is c_proj(y) with weight and bias times m
        for block in ref.blocks:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.mul_(m)
                proj.bias.mul_(m)
    idx = torch.randint(0, 96, (2, 16))
    torch.testing.assert_close(model(idx), ref(idx), rtol=1e-5, atol=1e-6)


def test_at_the_base_shape_mup_and_completep_initialise_exactly_as_sp():
    base = {**SHAPE, "base_d_model": 64, "base_n_layers": 4}
    states = []
    for p in ("sp", "mup", "completep"):
        torch.manual_seed(3)
        states.append(build_model(ModelConfig(**base, parametrization=p)).state_dict())
    for other in states[1:]:
        assert other.keys() == states[0].keys()
        assert all(torch.equal(other[k], states[0][k]) for k in other)


def test_initial_standard_deviations_follow_each_role():
    # d 256 over base 64: hidden matrices at 0.02 / 2, residual projections also / sqrt(2 L)
    # (CompleteP: sqrt(2 L_base)); embeddings and readout 0.02; biases 0.
    shape = {"vocab_size": 512, "seq_len": 64, "d_model": 256, "n_heads": 4, "n_layers": 4,
             "tie_embeddings": False}
    expected = {
        "sp": {"embedding": 0.02, "readout": 0.02, "hidden": 0.02, "hidden_out": 0.02 / 8**0.5},
        "mup": {"embedding": 0.02, "readout": 0.02, "hidden": 0.01, "hidden_out": 0.01 / 8**0.5},
        "completep": {"embedding": 0.02, "readout": 0.02, "hidden": 0.01,
                      "hidden_out": 0.01 / 2**0.5},
    }
    torch.manual_seed(0)
    for p, stds in expected.items():
        cfg = ModelConfig(**shape, parametrization=p, base_d_model=64, base_n_layers=1)
        model = build_model(cfg)
        for name, param, role in model.param_roles():
            if role in stds:
                assert par.init_std(cfg, role) == pytest.approx(stds[role], rel=1e-12)
                # the sample std of n normal draws: relative standard error 1 / sqrt(2n)
                rel_se = 1 / math.sqrt(2 * param.numel())
                assert param.std().item() == pytest.approx(stds[role], rel=6 * rel_se), name
            elif name.endswith("bias"):
                assert not param.any(), name


def test_param_roles_cover_every_parameter_once():
    for tie in (True, False):
        model = build_model(mup(tie_embeddings=tie, n_kv_heads=1), device="meta")
        roles = model.param_roles()
        assert len(roles) == len(list(model.parameters()))
        by_name = {name: role for name, _, role in roles}
        assert by_name["wte.weight"] == "embedding" and by_name["wpe.weight"] == "embedding"
        assert ("lm_head.weight" in by_name) is not tie
        assert by_name["blocks.0.attn.c_attn.weight"] == "hidden"
        assert by_name["blocks.0.mlp.c_proj.weight"] == "hidden_out"
        assert by_name["blocks.0.attn.c_attn.bias"] == "hidden_vector"
        assert by_name["blocks.3.ln_2.weight"] == "hidden_vector"
        assert by_name["ln_f.weight"] == "final_norm"


def test_learning_rate_weight_decay_and_epsilon_multipliers():
    # width_mult 4 (64 over 16), depth_mult 4 (4 over 1)
    m = mup()
    assert par.width_mult(m) == 4 and par.depth_mult(m) == 1
    assert [par.lr_mult(m, r) for r in par.ROLES] == [1, 1, 0.25, 0.25, 1, 1]
    assert [par.wd_mult(m, r) for r in par.ROLES] == [1, 1, 4, 4, 1, 1]
    assert par.adamw_eps(m) == 1e-8 and par.output_mult(m) == 0.25
    c = completep(completep_alpha=0.5)
    # hidden: m_N^-1 * m_L^(alpha - 1) = 1/4 * 4^-0.5; block vectors m_L^(alpha - 1)
    assert [par.lr_mult(c, r) for r in par.ROLES] == [1, 1, 0.125, 0.125, 0.5, 1]
    assert [par.wd_mult(c, r) for r in par.ROLES] == [1, 1, 4, 4, 1, 1]
    assert par.adamw_eps(c) == pytest.approx(1e-8 / 4 * 0.5, rel=1e-15)
    c1 = completep()  # alpha = 1: depth leaves the learning rates alone, epsilon / m_L
    assert [par.lr_mult(c1, r) for r in par.ROLES] == [1, 1, 0.25, 0.25, 1, 1]
    assert par.adamw_eps(c1) == pytest.approx(1e-8 / 16, rel=1e-15)
    assert par.residual_mult(c1) == 0.25
    with pytest.raises(ValueError, match="role='head' is not one of"):
        par.lr_mult(m, "head")
