"""The law a simulated trial's loss is drawn from: L(N, D) times a learning-rate and batch penalty.

L(N, D) = E + A / N^alpha + B / D^beta is Hoffmann et al. 2022 eq. 2. Around it, optionally, a
penalty quadratic in log learning rate and log batch size, centred on the compute-optimal
eta_opt(C) = a C^b and B_opt(C) = a C^b (C = 6 N D FLOPs, B in tokens per step): the form of the
landscapes in DeepSeek LLM (Bi et al. 2024, sec. 3.1, fig. 3), whose fits are eta_opt =
0.3118 C^-0.125 and B_opt = 0.2920 C^0.3271. Seed noise is log-normal: loss x exp(sigma z).
Pure arithmetic (no numpy), so a spec names a law without loading anything heavy.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields

__all__ = ["HparamLaw", "LAWS", "SimulatedLaw", "law_from_data", "noisy"]


@dataclass(frozen=True)
class HparamLaw:
    """A hyperparameter's compute-optimal value a C^b and the loss's curvature around it.

    The penalty is ``curvature * ln(value / optimum)^2``: a factor e off the optimum costs
    ``curvature`` of the loss (0.02: 2%).
    """

    coef: float
    exponent: float
    curvature: float

    def optimum(self, flops: float) -> float:
        """The compute-optimal value at ``flops`` (C, FLOPs)."""
        return self.coef * flops ** self.exponent

    def penalty(self, value: float, flops: float) -> float:
        """The loss's relative increase at ``value`` for budget ``flops``."""
        return self.curvature * math.log(value / self.optimum(flops)) ** 2


@dataclass(frozen=True)
class SimulatedLaw:
    """L(N, D, eta, B) = (E + A / N^alpha + B / D^beta) (1 + lr penalty + batch penalty).

    ``n_params`` N in parameters, ``n_tokens`` D in tokens, ``lr`` the peak learning rate and
    ``batch_tokens`` tokens per optimizer step; losses in nats/token. Without ``lr`` (or
    ``batch_size``) the law has no such penalty and the value is not needed.
    """

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    lr: HparamLaw | None = None
    batch_size: HparamLaw | None = None

    def loss(self, n_params: float, n_tokens: float, lr: float | None = None,
             batch_tokens: float | None = None) -> float:
        """The noise-free loss, nats/token.

        Raises:
            ValueError: N or D not positive, or a penalised hyperparameter not given or not
                positive.
        """
        if not (n_params > 0 and n_tokens > 0):
            raise ValueError(f"n_params={n_params} and n_tokens={n_tokens} must be > 0")
        base = self.E + self.A / n_params ** self.alpha + self.B / n_tokens ** self.beta
        flops = 6.0 * n_params * n_tokens
        factor = 1.0
        for name, law, value in (("lr", self.lr, lr), ("batch_tokens", self.batch_size,
                                                         batch_tokens)):
            if law is None:
                continue
            if value is None or not value > 0:
                raise ValueError(f"{name}={value}: this law penalises it, so it must be > 0")
            factor += law.penalty(value, flops)
        return base * factor

    def optimal_split(self, flops: float) -> tuple[float, float]:
        """N_opt, D_opt at ``flops`` under C = 6ND (Hoffmann et al. 2022 eq. 4)."""
        total = self.alpha + self.beta
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / total)
        return g * (flops / 6) ** (self.beta / total), (flops / 6) ** (self.alpha / total) / g

    def as_dict(self) -> dict:
        """The law as plain data (the spec's ``simulate.law`` form)."""
        out: dict = {f.name: getattr(self, f.name) for f in fields(self)
                     if f.name not in ("lr", "batch_size")}
        for name in ("lr", "batch_size"):
            law = getattr(self, name)
            if law is not None:
                out[name] = {f.name: getattr(law, f.name) for f in fields(law)}
        return out


def noisy(loss: float, sigma: float, rng: random.Random) -> float:
    """``loss`` times log-normal seed noise exp(sigma z), z ~ N(0, 1)."""
    return loss * math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else loss


#: DeepSeek LLM's fits (Bi et al. 2024, sec. 3.1): eta_opt = 0.3118 C^-0.125 and
#: B_opt = 0.2920 C^0.3271 tokens; the curvatures are this project's choice (a factor e off
#: costs 2% and 1%), with DeepSeek's near-optimal band (0.25% of the best) about x1.4 wide in lr.
DEEPSEEK_LR = HparamLaw(coef=0.3118, exponent=-0.125, curvature=0.02)
DEEPSEEK_BATCH = HparamLaw(coef=0.2920, exponent=0.3271, curvature=0.01)

#: Named laws: Chinchilla's published fit (Hoffmann et al. 2022, eq. 10), an asymmetric one
#: (alpha 0.25, beta 0.40; A and B chosen so N_opt at 1e13 FLOPs is about 4e5, near
#: Chinchilla's), and Chinchilla's with DeepSeek's learning-rate and batch-size penalties.
LAWS: dict[str, SimulatedLaw] = {
    "chinchilla": SimulatedLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28),
    "asymmetric": SimulatedLaw(E=1.69, A=180.0, B=2000.0, alpha=0.25, beta=0.40),
    "chinchilla-lr": SimulatedLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,
                                  lr=DEEPSEEK_LR, batch_size=DEEPSEEK_BATCH),
}


_LAW_FIELDS = ("E", "A", "B", "alpha", "beta")
_HPARAM_FIELDS = ("coef", "exponent", "curvature")


def _number(where: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}={value!r}: must be a finite number")
    if positive and not value > 0:
        raise ValueError(f"{where}={value!r}: must be > 0")
    return float(value)


def _hparam(where: str, data: object) -> HparamLaw:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be a mapping of {', '.join(_HPARAM_FIELDS)}")
    unknown = sorted(set(data) - set(_HPARAM_FIELDS))
    missing = [k for k in _HPARAM_FIELDS if k not in data]
    if unknown or missing:
        raise ValueError(f"{where}: " + (f"unknown field(s) {', '.join(map(str, unknown))}"
                                         if unknown else f"missing {', '.join(missing)}"))
    return HparamLaw(_number(f"{where}.coef", data["coef"], positive=True),
                     _number(f"{where}.exponent", data["exponent"], positive=False),
                     _number(f"{where}.curvature", data["curvature"], positive=True))


def law_from_data(data: object, where: str = "law") -> SimulatedLaw:
    """A law from a name of `LAWS` or a mapping ``{E, A, B, alpha, beta, lr?, batch_size?}``.

    ``lr`` and ``batch_size`` are ``{coef, exponent, curvature}`` (`HparamLaw`).

    Raises:
        ValueError: An unknown name, a missing or unknown field, or a value out of range
            (E >= 0; A, B, alpha, beta, coef, curvature > 0), naming ``where`` and the field.
    """
    if isinstance(data, str):
        if data not in LAWS:
            raise ValueError(f"{where}={data!r}: unknown law; choose from {', '.join(LAWS)} "
                             "or give {E, A, B, alpha, beta}")
        return LAWS[data]
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be a law's name ({', '.join(LAWS)}) or a mapping of "
                         f"{', '.join(_LAW_FIELDS)} (lr and batch_size optional)")
    unknown = sorted(map(str, set(data) - {*_LAW_FIELDS, "lr", "batch_size"}))
    missing = [k for k in _LAW_FIELDS if k not in data]
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; a law has "
                         f"{', '.join(_LAW_FIELDS)}, lr, batch_size")
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    values = {k: _number(f"{where}.{k}", data[k], positive=k != "E") for k in _LAW_FIELDS}
    if values["E"] < 0:
        raise ValueError(f"{where}.E={values['E']!r}: must be >= 0")
    lr, batch = (_hparam(f"{where}.{k}", data[k]) if data.get(k) is not None else None
                 for k in ("lr", "batch_size"))
    return SimulatedLaw(values["E"], values["A"], values["B"], values["alpha"], values["beta"],
                        lr=lr, batch_size=batch)
