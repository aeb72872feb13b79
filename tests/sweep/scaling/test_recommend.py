"""From fit to model: shapes on the study's size rule nearest to N_opt, priced by the cost model."""

import pytest
import yaml

from sweep.kinds.scaling.recommend import recommend, spec_fragment
from sweep.spec import parse_spec
from sweep_models.config import ModelConfig
from sweep_models.cost import estimate, flops_per_token

SPEC = parse_spec({
    "name": "iso", "data": "builtin:python-stdlib", "model": {"seq_len": 128},
    "train": {"batch_size": 8, "lr": 3e-3},
    "scaling": {"budgets": [1e12, 3e12, 1e13],
                "rule": {"d_model": {"min": 64, "max": 256, "step": 64}, "aspect": 64,
                         "d_head": 64, "d_ff_ratio": 4}},
})


def test_recommendations_are_priced_by_the_cost_model():
    recs = recommend(SPEC, 1e19, 2e8, k=3)
    assert len(recs) == 3
    assert [r.n_params for r in recs] == sorted(r.n_params for r in recs)
    assert min(r.n_params for r in recs) < 2e8 * 1.3 and max(r.n_params for r in recs) > 2e8 / 1.3
    for r in recs:
        model = ModelConfig(seq_len=128, **r.shape)
        assert r.shape["n_layers"] == max(1, round(r.shape["d_model"] / 64))
        assert r.flops_per_token_train == flops_per_token(model, train=True)
        assert r.n_tokens == int(1e19 / r.flops_per_token_train)
        assert r.tokens_per_param == pytest.approx(r.n_tokens / r.n_params)
        cost = estimate(model, batch_size=8, seq_len=128, dtype="bf16", device="cuda")
        assert r.mem_estimate_bytes == cost.memory.total and r.device == "cuda"


def test_spec_fragment_trains_the_shape_for_its_tokens():
    rec = recommend(SPEC, 1e18, 5e7, k=1)[0]
    fragment = yaml.safe_load(spec_fragment(rec))
    assert fragment == {"model": rec.shape, "train": {"tokens": rec.n_tokens}}
    merged = {"name": "train-it", "data": "builtin:python-stdlib",
              "model": {"seq_len": 128, **fragment["model"]},
              "train": {"batch_size": 8, "lr": 3e-3, **fragment["train"]}}
    assert parse_spec(merged).model["d_model"] == rec.shape["d_model"]


def test_bad_requests_name_the_problem():
    with pytest.raises(ValueError, match="both must be > 0"):
        recommend(SPEC, -1.0, 1e8)
    with pytest.raises(ValueError, match="device='tpu' is not one of cuda, cpu"):
        recommend(SPEC, 1e18, 1e8, device="tpu")
    plain = parse_spec({"name": "p", "data": "builtin:python-stdlib",
                        "train": {"tokens": 1000}})
    with pytest.raises(ValueError, match="not a scaling study"):
        recommend(plain, 1e18, 1e8)
