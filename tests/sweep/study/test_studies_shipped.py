"""Every shipped study loads, validates and prices; `sweep validate` exit codes."""

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweep import space
from sweep.cli import app
from sweep.kinds.pbt.mutations import pbt_mutations
from sweep.spec import LrLaw, load_spec
from sweep.spec.from_study import lr_domain

STUDIES = sorted((Path(__file__).resolve().parents[3] / "studies").glob("*.yaml"))
runner = CliRunner()


def test_the_four_studies_ship():
    assert {p.stem for p in STUDIES} >= {"quickstart", "pbt", "sparsity-temperature", "pareto"}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_study_loads_and_every_sample_is_valid(path):
    spec = load_spec(path)
    assert spec.name == path.stem
    header = path.read_text().splitlines()[:6]
    assert any(f"sweep run studies/{path.name}" in line for line in header)
    assert any(re.search(r"CPU.*GPU", line) for line in header)
    summary = space.summarize(_with_stand_in_law(spec), n_samples=64, device="cpu")
    assert summary.n_invalid == 0, summary.invalid_examples
    assert summary.n_infeasible == 0, summary.infeasible_examples


def _with_stand_in_law(spec):
    """A study whose lr comes from another's fit (``train.lr: {from_study}``) priced under
    DeepSeek LLM's published law (the lr sets no cost). Its source must be a shipped hparams
    study, named so that its default folder (``runs/<name>``) is where the law is read."""
    domain = lr_domain(spec)
    if domain is None:
        return spec
    assert domain.from_study in {p.stem for p in STUDIES}
    assert load_spec(STUDIES[[p.stem for p in STUDIES].index(domain.from_study)]).kind.name \
        == "hparams"
    law = LrLaw(coef=0.3118, exponent=-0.125, estimator="band", budgets=(1e17, 3e20),
                source="DeepSeek LLM, Bi et al. 2024, sec. 3.1", sha256="")
    train = {**spec.train, "lr": domain.model_copy(update={"law": law})}
    return spec.model_copy(update={"train": train})


def test_study_algorithms():
    specs = {p.stem: load_spec(p) for p in STUDIES}
    q = specs["quickstart"].search
    assert (q.executor, q.sampler, q.pruner) == ("optuna", "tpe", "hyperband")
    assert specs["quickstart"].data.uri == "builtin:python-stdlib"
    p = specs["pbt"].search
    assert (p.executor, p.scheduler) == ("ray", "pbt")
    assert set(pbt_mutations(specs["pbt"])) == {"train.lr", "train.weight_decay",
                                                      "model.attn_temperature"}
    s = specs["sparsity-temperature"]
    assert (s.search.executor, s.search.scheduler) == ("ray", "asha")
    assert s.budget()[0] == "flops"
    assert specs["pareto"].search.sampler == "nsga2"
    assert specs["pareto"].search.objectives == ["val_loss", "flops_per_token"]


def test_validate_cli_ok_and_json():
    path = str(next(p for p in STUDIES if p.stem == "quickstart"))
    result = runner.invoke(app, ["validate", path, "--samples", "16"])
    assert result.exit_code == 0, result.output
    assert "model.d_model" in result.output and "n_params" in result.output
    result = runner.invoke(app, ["validate", path, "--samples", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    lo, hi = data["cost"]["n_params"]
    assert 0 < lo < hi and data["n_configs"] == 18


def test_validate_cli_bad_spec_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\ndata: builtin:python-stdlib\ntrain: {tokens: 1000}\n"
                   "search: {sampler: annealing}\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "search.sampler" in result.output
    result = runner.invoke(app, ["validate", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "missing.yaml" in result.output


def test_validate_cli_rejects_a_space_with_no_feasible_config(tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text("name: big\ndata: builtin:python-stdlib\ntrain: {tokens: 1000}\n"
                    "model: {d_model: {int: [64, 128], step: 64}}\n"
                    "constraints: {max_params: 1000}\n")
    result = runner.invoke(app, ["validate", str(spec), "--samples", "8"])
    assert result.exit_code == 2
    assert "none of 10 sampled configs" in result.output


CLUSTER_SPECS = sorted((Path(__file__).resolve().parents[3] / "docker").glob("*.yaml"))
CLUSTER_SPECS = [p for p in CLUSTER_SPECS if "compose" not in p.name]


@pytest.mark.parametrize("path", CLUSTER_SPECS, ids=lambda p: p.stem)
def test_cluster_specs_in_docker_validate(path):
    spec = load_spec(path)
    assert spec.tracking.uri and spec.tracking.uri.startswith("http://")
    summary = space.summarize(spec, n_samples=16, device="cpu")
    assert summary.n_invalid == 0, summary.invalid_examples


def test_compose_cluster_shares_one_ray_token_and_binds_loopback():
    compose = yaml.safe_load((Path(__file__).resolve().parents[3] / "docker"
                              / "docker-compose.yml").read_text())
    services = compose["services"]
    ray_side = ["ray-head", "ray-worker", "sweep"]
    for name in ray_side:
        env = services[name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?"), name
    assert services["sweep"]["environment"]["RAY_ADDRESS"] == "ray-head:6379"
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
