"""The simulated law: Chinchilla's published split, the penalties' shape, the noise."""

import math
import random

import pytest

from sweep.simulate.law import LAWS, HparamLaw, SimulatedLaw, noisy


def test_chinchillas_split_matches_the_published_numbers():
    # ../shared/reference: N_opt = 3.249e10, D_opt = 3.016e12 at C = 5.88e23.
    n_opt, d_opt = LAWS["chinchilla"].optimal_split(5.88e23)
    assert f"{n_opt:.4g} {d_opt:.4g}" == "3.249e+10 3.016e+12"
    assert 6 * n_opt * d_opt == pytest.approx(5.88e23, rel=1e-12)


def test_the_split_is_the_minimum_of_the_law_at_its_budget():
    law = LAWS["asymmetric"]
    n_opt, _ = law.optimal_split(1e13)
    def at(n):
        return law.loss(n, 1e13 / (6 * n))
    assert at(n_opt) < at(n_opt * 1.01) and at(n_opt) < at(n_opt / 1.01)


def test_the_penalty_is_zero_at_the_optimum_and_quadratic_in_log_lr():
    law = LAWS["chinchilla-lr"]
    n, d = 4e5, 4e6
    c = 6 * n * d
    lr_opt, b_opt = law.lr.optimum(c), law.batch_size.optimum(c)
    assert lr_opt == pytest.approx(0.3118 * c ** -0.125)
    base = SimulatedLaw(**{k: v for k, v in law.as_dict().items()
                           if k not in ("lr", "batch_size")}).loss(n, d)
    assert law.loss(n, d, lr_opt, b_opt) == pytest.approx(base, rel=1e-12)
    up = law.loss(n, d, lr_opt * math.e, b_opt) / base - 1
    down = law.loss(n, d, lr_opt / math.e, b_opt) / base - 1
    assert up == pytest.approx(0.02) and down == pytest.approx(0.02)
    assert law.loss(n, d, lr_opt * math.e ** 2, b_opt) / base - 1 == pytest.approx(0.08)


def test_a_penalised_hyperparameter_must_be_given():
    with pytest.raises(ValueError, match="lr=None"):
        LAWS["chinchilla-lr"].loss(4e5, 4e6)
    with pytest.raises(ValueError, match="n_params=0"):
        LAWS["chinchilla"].loss(0, 4e6)


def test_noise_is_log_normal_with_the_stated_sigma():
    rng = random.Random(0)
    logs = [math.log(noisy(2.0, 0.01, rng) / 2.0) for _ in range(20000)]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    assert abs(mean) < 3e-4 and sd == pytest.approx(0.01, rel=0.03)
    assert noisy(2.0, 0.0, rng) == 2.0


def test_as_dict_round_trips():
    law = LAWS["chinchilla-lr"]
    data = law.as_dict()
    again = SimulatedLaw(**{**data, "lr": HparamLaw(**data["lr"]),
                            "batch_size": HparamLaw(**data["batch_size"])})
    assert again == law
