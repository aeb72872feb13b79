"""The Ray Tune executor end to end on tiny models and budgets (local Ray, 2 CPUs).

Trial outcomes are made predictable by the spec, not by luck: the random sampler's draws are
known in advance (`sweep.space.sample_params` draws what ``OptunaSearch`` with the same seeded
sampler draws), so each test picks a seed whose draws cover the cases it checks, and the
expected state of every trial follows from its own params.
"""

import json
import logging
import math
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweep import space
from sweep.results import load_results
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep_models.config import ModelConfig
from sweep_models.cost import param_count

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a module-wide local Ray instance

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000"
BUDGET = 20000
TRAINED = BUDGET // (4 * 32) * (4 * 32)  # whole steps of batch 4 x seq_len 32
SCHEMA_METRICS = {
    "n_params", "n_params_non_embedding", "flops_per_token", "flops_per_token_dense",
    "train_flops", "mem_estimate_bytes", "val_loss", "train_loss", "tokens_per_s",
    "best_val_loss", "tokens",
}
GOOD_LR, BAD_LR = 3e-2, 1e-6  # BAD_LR leaves the model at its initial loss for this budget


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()


def make_spec(name, *, model=None, train=None, search=None, **sections):
    data = {
        "name": name,
        "data": DATA,
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 1,
                  **(model or {})},
        "train": {"tokens": BUDGET, "batch_size": 4, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024, **(train or {})},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none", "n_trials": 3,
                   "parallel": 2, **(search or {})},
        "resources": {"cpus_per_trial": 1},
        **sections,
    }
    return parse_spec(data)


def seed_where(build, n, accept):
    """The first seed whose ``n`` random draws satisfy ``accept``, and those draws."""
    for seed in range(200):
        spec = build(seed)
        draws = space.sample_params(spec, n, seed=seed)
        if accept(draws):
            return spec, draws
    raise AssertionError("no seed gives the draws this test needs")


def child_runs(summary):
    client = MlflowClient(summary.tracking_uri)
    parent = client.get_run(summary.parent_run_id)
    runs = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return client, parent, {int(r.data.tags["sweep.trial_number"]): r for r in runs}


def ray_records(out: Path) -> dict[int, dict]:
    """Ray's own record of each trial: status and last result, keyed by trial number."""
    from ray.tune import ExperimentAnalysis

    (experiment,) = (out / "ray").iterdir()
    analysis = ExperimentAnalysis(str(experiment))
    records = {}
    for trial in analysis.trials:
        config = trial.config
        number = int(config.get("sweep.trial_number", config.get("sweep.member", -1)))
        records[number] = {"status": trial.status, "last": trial.last_result or {}}
    return records


# ---------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def plain_study(tmp_path_factory, new_store):
    out = tmp_path_factory.mktemp("ray-plain")
    spec = make_spec("ray-plain")
    new_store(out)
    return spec, out, run_study(spec, out_dir=out, quiet=True)


def test_study_end_to_end_writes_the_optuna_executors_layout(plain_study):
    spec, out, summary = plain_study
    assert summary.state == "COMPLETE" and summary.counts["COMPLETE"] == 3
    client, parent, runs = child_runs(summary)
    assert parent.data.tags["sweep.executor"] == "ray"
    assert parent.data.tags["sweep.algorithm"] == "random+none"
    assert parent.data.metrics["trials_complete"] == 3
    assert sorted(runs) == [0, 1, 2]
    for number, run in runs.items():
        assert run.info.run_name == f"trial-{number}"
        assert SCHEMA_METRICS <= set(run.data.metrics), number
        assert run.data.tags["sweep.state"] == "COMPLETE"
        assert run.info.status == "FINISHED"
        assert run.data.metrics["tokens"] == TRAINED
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
        assert steps == sorted(steps) and steps[-1] == TRAINED  # step = tokens seen
        assert 1e-3 <= float(run.data.params["train.lr"]) <= 3e-2
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.csv", "spec.yaml", "plots"} <= artifacts


def test_results_table_matches_rays_records(plain_study):
    spec, out, summary = plain_study
    frame = load_results(out)
    records = ray_records(out)
    assert len(frame) == len(records) == spec.search.n_trials
    for row in frame.itertuples():
        record = records[row.trial]
        assert record["status"] == "TERMINATED"
        assert record["last"]["sweep_state"] == row.state == "COMPLETE"
        assert record["last"]["tokens"] == row.tokens == TRAINED
        assert math.isclose(record["last"]["best_val_loss"], row.best_val_loss, rel_tol=1e-6)


def test_draws_match_the_sampler_ray_uses(plain_study):
    spec, out, summary = plain_study
    draws = space.sample_params(spec, 3, seed=spec.search.seed)
    frame = load_results(out).set_index("trial")
    for number, params in enumerate(draws):
        assert math.isclose(frame.loc[number, "train.lr"], params["train.lr"], rel_tol=1e-9)


def test_a_grid_sampler_study_trains_each_point_once_and_ends_cleanly(tmp_path, new_store):
    # GridSampler asks the study to stop once its grid is used up; told outside optimize, that
    # request used to crash the last tell (the parent FAILED, the study exit 1).
    spec = make_spec("ray-grid", train={"lr": {"choice": [1e-3, 3e-3, 1e-2]}},
                     search={"sampler": "grid", "n_trials": 3})
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    assert summary.state == "COMPLETE"
    assert {k: v for k, v in summary.counts.items() if v} == {"COMPLETE": 3}
    client, parent, runs = child_runs(summary)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.state"] == "COMPLETE"
    assert sorted(runs) == [0, 1, 2]
    assert sorted(float(r.data.params["train.lr"]) for r in runs.values()) == [1e-3, 3e-3, 1e-2]
    assert {r.data.tags["sweep.state"] for r in runs.values()} == {"COMPLETE"}


# --------------------------------------------------------------------------------- ASHA
def test_asha_stops_trials_that_learn_nothing_early(tmp_path, new_store):
    # Sequential trials: the first learns; the next ones, at a learning rate that leaves the
    # model at its initial loss, meet the first rung after the first trial set it.
    def build(seed):
        return make_spec("ray-asha", train={"lr": {"choice": [GOOD_LR, BAD_LR]}},
                         search={"scheduler": "asha", "parallel": 1, "seed": seed})

    spec, draws = seed_where(build, 3, lambda d: [p["train.lr"] for p in d]
                             == [GOOD_LR, BAD_LR, BAD_LR])
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    client, parent, runs = child_runs(summary)
    frame = load_results(tmp_path).set_index("trial")
    assert frame.loc[0, "state"] == "COMPLETE" and frame.loc[0, "tokens"] == TRAINED
    good = dict(sorted((m.step, m.value) for m in
                       client.get_metric_history(runs[0].info.run_id, "val_loss")))
    for number in (1, 2):
        assert frame.loc[number, "state"] == "PRUNED", number
        assert frame.loc[number, "tokens"] < TRAINED
        assert runs[number].info.status == "FINISHED"  # not a failure
        history = client.get_metric_history(runs[number].info.run_id, "val_loss")
        steps = [m.step for m in history]
        assert len(steps) == len(set(steps))
        last = max(history, key=lambda m: m.step)
        assert last.step < TRAINED
        assert last.value > good[last.step]  # stopped for being worse at the same tokens
    assert summary.counts == {"COMPLETE": 1, "PRUNED": 2, "FAILED": 0, "INFEASIBLE": 0,
                              "DIVERGED": 0, "RUNNING": 0, "INTERRUPTED": 0}
    # Actors are kept for the next trial (``reuse_actors``), and a pruned trial's thread ends at
    # once, so the process that trained trial 1 until ASHA stopped it takes trial 2.
    assert runs[2].data.tags["sweep.owner"] == runs[1].data.tags["sweep.owner"]
    # ASHA's top rung (just below the budget here) never sees a bare evaluation at the end of
    # the budget: only the final report, with the trial's state, reaches it.
    for result_file in (tmp_path / "ray").glob("*/*/result.json"):
        results = [json.loads(line) for line in result_file.read_text().splitlines()]
        at_end = [r for r in results if r["tokens"] >= TRAINED]
        assert all("sweep_state" in r for r in at_end), result_file.parent.name


# ------------------------------------------------------------ infeasible and failing trials
@pytest.fixture(scope="module")
def mixed_study(tmp_path_factory, new_store):
    """Wide models break ``max_params``; vocab 8 < the corpus's 16 makes the trainer raise."""
    small = param_count(ModelConfig(vocab_size=16, seq_len=32, d_model=16, n_heads=2,
                                    n_layers=1))
    wide = param_count(ModelConfig(vocab_size=16, seq_len=32, d_model=64, n_heads=2,
                                   n_layers=1))
    limit = (small + wide) // 2

    def build(seed):
        return make_spec("ray-mixed", model={"d_model": {"choice": [16, 64]},
                                             "vocab_size": {"choice": [8, 16]}},
                         train={"lr": 1e-2}, constraints={"max_params": limit},
                         search={"n_trials": 4, "seed": seed})

    def kind(p):
        if p["model.d_model"] == 64:
            return "INFEASIBLE"
        return "FAILED" if p["model.vocab_size"] == 8 else "COMPLETE"

    spec, draws = seed_where(build, 4, lambda d: {kind(p) for p in d} == {
        "INFEASIBLE", "FAILED", "COMPLETE"} and kind(d[0]) == "FAILED")
    out = tmp_path_factory.mktemp("ray-mixed")
    new_store(out)
    summary = run_study(spec, out_dir=out, quiet=True)
    return out, summary, [kind(p) for p in draws]


def test_infeasible_trials_cost_no_training(mixed_study):
    out, summary, expected = mixed_study
    client, parent, runs = child_runs(summary)
    records = ray_records(out)
    infeasible = [n for n, k in enumerate(expected) if k == "INFEASIBLE"]
    assert infeasible
    for number in infeasible:
        run = runs[number]
        assert run.data.tags["sweep.state"] == "INFEASIBLE"
        assert "max_params" in run.data.tags["sweep.fail_reason"]
        assert "val_loss" not in run.data.metrics and "train_loss" not in run.data.metrics
        assert run.data.metrics["n_params"] > parse_limit(run.data.tags["sweep.fail_reason"])
        assert records[number]["last"]["tokens"] == 0
        assert records[number]["last"]["training_iteration"] == 1  # one report, the penalty


def parse_limit(reason: str) -> int:
    return int(reason.split("constraints.max_params=")[1].split()[0].replace(",", ""))


def test_a_trial_that_raises_ends_failed_and_the_study_continues(mixed_study):
    out, summary, expected = mixed_study
    client, parent, runs = child_runs(summary)
    records = ray_records(out)
    assert sorted(runs) == list(range(4))  # trial 0 raised; the other three still ran
    for number, kind in enumerate(expected):
        assert runs[number].data.tags["sweep.state"] == kind, number
        if kind == "FAILED":
            assert "vocab_size=8" in runs[number].data.tags["sweep.fail_reason"]
            assert runs[number].info.status == "FAILED"
            assert records[number]["status"] == "ERROR"
        else:
            assert records[number]["status"] == "TERMINATED"
    assert summary.counts["FAILED"] == expected.count("FAILED")
    assert summary.counts["COMPLETE"] == expected.count("COMPLETE") > 0


# ---------------------------------------------------------------------------------- PBT
def test_pbt_exploits_the_better_member_and_mutates_its_lr(tmp_path, new_store):
    # Synchronous PBT: both members stop at 4096 tokens and the worse one then exploits the
    # better one, whatever the scheduling. (Asynchronous PBT compares a member only with
    # members alive at that moment; on a loaded 2-core machine one member may finish its
    # whole budget before the other has reported once, and nothing is exploited.)
    def build(seed):
        return make_spec(
            "ray-pbt", train={"lr": {"float": [1e-6, 3e-2], "log": True}, "tokens": 10240,
                              "schedule": "constant", "warmup": 0.0},
            search={"scheduler": "pbt", "n_trials": 2, "seed": seed,
                    "pbt": {"perturbation_interval": 4096, "checkpoint_interval": 2048,
                            "quantile_fraction": 0.5, "resample_probability": 0.0,
                            "synch": True,
                            "hyperparam_mutations": {"lr": {"float": [1e-6, 3e-2],
                                                            "log": True}}}})

    spec, draws = seed_where(build, 2, lambda d: max(p["train.lr"] for p in d) > 1e-2
                             and min(p["train.lr"] for p in d) < 1e-5)
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    client, parent, runs = child_runs(summary)
    assert sorted(runs) == [0, 1]
    assert all(r.data.tags["sweep.state"] == "COMPLETE" for r in runs.values())
    bad = min(range(2), key=lambda n: draws[n]["train.lr"])
    good = 1 - bad
    assert float(runs[bad].data.params["train.lr"]) == pytest.approx(draws[bad]["train.lr"])

    def history(number, key):
        return sorted((m.step, m.value) for m in
                      client.get_metric_history(runs[number].info.run_id, key))

    donors = history(bad, "pbt.donor")
    assert donors, "the member with the tiny lr was never exploited"
    step, donor = donors[0]
    assert step > 0 and donor == good
    # Its lr changed mid-run to a perturbation (x0.8 or x1.2) of the donor's lr, and the
    # param keeps its first value.
    lrs = dict(history(bad, "pbt.train.lr"))
    assert min(abs(lrs[step] / (draws[good]["train.lr"] * f) - 1) for f in (0.8, 1.2)) < 1e-6
    assert float(runs[bad].data.params["train.lr"]) == pytest.approx(draws[bad]["train.lr"])
    # It continued from the donor's checkpoint: the donor reported a checkpoint at that token
    # count, and the member's next evaluation is near the donor's loss, far below its own
    # (untrained) one. Asynchronous PBT may clone a checkpoint older than the member's own
    # progress, so its history is split by when points were logged, not by step.
    def timed(number, key):
        return sorted((m.timestamp, m.step, m.value) for m in
                      client.get_metric_history(runs[number].info.run_id, key))

    (exploited_at, _, _), *_ = timed(bad, "pbt.donor")
    good_losses = dict(history(good, "val_loss"))
    assert step in good_losses
    before = [(s, v) for t, s, v in timed(bad, "val_loss") if t < exploited_at]
    after = [(s, v) for t, s, v in timed(bad, "val_loss") if t >= exploited_at]
    assert before and after
    first_step, first_loss = after[0]
    assert first_step > step
    assert first_loss < before[-1][1] - 0.1
    assert abs(first_loss - good_losses[first_step]) < 0.1


def test_pbt_mutations_stay_in_their_domain():
    from ray.tune.schedulers.pbt import _explore

    from sweep.kinds.pbt.population import member_index
    from sweep.kinds.pbt.tune import make_pbt_scheduler

    spec = make_spec("ray-pbt-domain", train={"schedule": "constant"}, search={
        "scheduler": "pbt", "n_trials": 2,
        "pbt": {"perturbation_interval": 4096, "resample_probability": 0.0,
                "hyperparam_mutations": {"lr": {"float": [1e-3, 3e-2], "log": True},
                                         "dropout": {"float": [0.0, 0.2]}}}})
    scheduler = make_pbt_scheduler(spec)
    config = {"train.lr": 3e-2, "model.dropout": 0.2, "sweep.member": 0}
    for _ in range(20):  # x1.2 at the top of the range must come back to the bound
        new, _ = _explore(config, scheduler._hyperparam_mutations, 0.0, (1.2, 0.8),
                          scheduler._custom_explore_fn)
        assert 1e-3 <= new["train.lr"] <= 3e-2 and 0.0 <= new["model.dropout"] <= 0.2
        assert new["train.lr"] in (3e-2, pytest.approx(3e-2 * 0.8))
    assert member_index("a1b2c_00003") == 3


@pytest.mark.parametrize("domain, expected", [
    ({"int": [1, 4]}, {1, 2, 3, 4}),
    ({"int": [1, 7], "step": 2}, {1, 3, 5, 7}),
    ({"int": [1, 4], "log": True}, {1, 2, 3, 4}),
])
def test_pbt_resamples_integers_with_both_bounds(domain, expected):
    from ray.tune.schedulers.pbt import _explore

    from sweep.kinds.pbt.tune import make_pbt_scheduler

    spec = make_spec("ray-pbt-int", train={"schedule": "constant", "grad_clip": 1.0}, search={
        "scheduler": "pbt", "n_trials": 2,
        "pbt": {"perturbation_interval": 4096, "resample_probability": 1.0,
                "hyperparam_mutations": {"grad_clip": domain}}})
    scheduler = make_pbt_scheduler(spec)
    config = {"train.grad_clip": 2, "sweep.member": 0}
    drawn = set()
    for _ in range(400):  # P(one of 4 values never drawn) < 4 * 0.85**400
        new, _ = _explore(config, scheduler._hyperparam_mutations, 1.0, (1.2, 0.8),
                          scheduler._custom_explore_fn)
        assert isinstance(new["train.grad_clip"], int)
        drawn.add(new["train.grad_clip"])
    assert drawn == expected


def test_pbt_keeps_few_checkpoints_and_exploits_read_the_donors(tmp_path, monkeypatch,
                                                                new_store):
    # One checkpoint kept per member, one every 1024 tokens, perturbations every 2048: a donor
    # reports newer checkpoints (and Ray deletes the one PBT picked) while the member that
    # exploits it waits for a slot among 4 members on 2 CPUs (synchronous PBT, so exploits
    # happen whatever the scheduling). Every exploit must still load its donor's weights.
    from sweep.adapters.ray import PinnedPBT
    from sweep.kinds.pbt import population

    monkeypatch.setattr(population, "CHECKPOINTS_KEPT", 1)
    schedulers, on_disk, seen = [], [], set()
    original = PinnedPBT.on_trial_result

    def counting(self, controller, trial, result):
        if self not in schedulers:
            schedulers.append(self)
        folders = list((tmp_path / "ray").glob("*/*/checkpoint_*"))
        seen.update(folders)
        per_member = {}
        for f in folders:
            per_member[f.parent] = per_member.get(f.parent, 0) + 1
        pinned = list((tmp_path / "ray").glob("*/pbt-pinned/*"))
        on_disk.append((max(per_member.values(), default=0), len(pinned)))
        return original(self, controller, trial, result)

    monkeypatch.setattr(PinnedPBT, "on_trial_result", counting)

    def build(seed):
        return make_spec(
            "ray-pbt-keep", train={"lr": {"float": [1e-6, 3e-2], "log": True}, "tokens": 6144,
                                   "schedule": "constant", "warmup": 0.0, "eval_every": 1024},
            search={"scheduler": "pbt", "n_trials": 4, "seed": seed,
                    "pbt": {"perturbation_interval": 2048, "checkpoint_interval": 1024,
                            "quantile_fraction": 0.25, "resample_probability": 0.0,
                            "synch": True,
                            "hyperparam_mutations": {"lr": {"float": [1e-6, 3e-2],
                                                            "log": True}}}})

    spec, draws = seed_where(build, 4, lambda d: max(p["train.lr"] for p in d) > 1e-2
                             and min(p["train.lr"] for p in d) < 1e-5)
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True)
    client, parent, runs = child_runs(summary)
    assert sorted(runs) == [0, 1, 2, 3]
    assert all(r.data.tags["sweep.state"] == "COMPLETE" for r in runs.values())
    (scheduler,) = schedulers
    # Exploits happened, and each restarted its member from its donor's checkpoint: the
    # member's run records the donor named in the checkpoint it loaded (pbt.donor), at a token
    # count the donor checkpointed.
    assert scheduler.exploits
    exploited = {}
    for member, donor, _ in scheduler.exploits:
        exploited.setdefault(ray_executor_index(member), []).append(ray_executor_index(donor))
    for number, donors in exploited.items():
        loaded = sorted((m.step, m.value) for m in
                        client.get_metric_history(runs[number].info.run_id, "pbt.donor"))
        assert [int(v) for _, v in loaded] == donors, number
        for step, donor in loaded:
            assert step > 0 and step % 1024 == 0
            donor_steps = {m.step for m in client.get_metric_history(
                runs[int(donor)].info.run_id, "val_loss")}
            assert step in donor_steps
    # Checkpoints on disk stayed bounded: one kept per member (plus the one being reported),
    # at most one pinned copy per member, though each member wrote 6.
    assert len(seen) > 4 * 2
    assert max(n for n, _ in on_disk) <= 2 and max(p for _, p in on_disk) <= 4
    assert not list((tmp_path / "ray").glob("*/pbt-pinned"))  # removed at the end


def ray_executor_index(trial_id):
    from sweep.kinds.pbt.population import member_index

    return member_index(trial_id)
