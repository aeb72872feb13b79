"""The rules of a population-based-training study (``search.scheduler: pbt``).

PBT draws its population at random and copies weights between members, so it mutates only
fields that keep a member's tensor shapes, parametrization and data layout
(`sweep.spec.fields.PBT_MUTABLE`), searches no shape field, checkpoints at intervals that divide
its perturbation interval, and counts its budget in tokens.
"""

from __future__ import annotations

from sweep.kinds.pbt.section import PBTSpec
from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.fields import PBT_MUTABLE, SHAPE_FIELDS
from sweep.spec.schema import StudySpec
from sweep.spec.values import check_rule, check_value, is_num, known_fields

__all__ = ["pbt_problems"]


def pbt_problems(spec: StudySpec) -> list[str]:
    """The rules of a PBT study: its search, its mutations, its intervals and its budget."""
    s = spec.search
    pbt: PBTSpec | None = spec.section("search.pbt")
    problems = []
    if pbt is None:
        problems.append("search.pbt: scheduler pbt needs a pbt section "
                        "(perturbation_interval, hyperparam_mutations)")
    if spec.simulate is not None:
        problems.append("simulate: population-based training trains its members in chunks "
                        "between checkpoints and changes their hyperparameters as they train; a "
                        "simulated trial has no such training, so a PBT study cannot be simulated")
    if s.sampler not in ("random", "grid"):
        problems.append(f"search.sampler: pbt draws its population at random (Ray Tune "
                        f"cannot combine a search algorithm with PBT); {s.sampler} "
                        "does not apply, use random")
    if s.checkpoint_interval is not None:
        problems.append("search.checkpoint_interval: PBT members checkpoint every "
                        "search.pbt.checkpoint_interval tokens; set that one instead")
    return problems if pbt is None else problems + _mutation_problems(spec, pbt)


def _mutation_problems(spec: StudySpec, pbt: PBTSpec) -> list[str]:
    problems = []
    for name, param in pbt.hyperparam_mutations.items():
        path = f"search.pbt.hyperparam_mutations.{name}"
        bare = name.split(".", 1)[1] if name.startswith(("model.", "train.")) else name
        if bare in SHAPE_FIELDS:
            problems.append(f"{path}: PBT cannot mutate {bare!r}: it fixes tensor shapes, the "
                            "parametrization or the data layout of a member, which must stay "
                            "the same while weights are copied between members; mutable: "
                            f"{', '.join(PBT_MUTABLE)}")
        elif bare not in PBT_MUTABLE or (name != bare and name.split(".")[0]
                                         != PBT_MUTABLE[bare]):
            problems.append(f"{path}: not a field PBT can change on a live trial; mutable: "
                            f"{', '.join(PBT_MUTABLE)}")
        elif not isinstance(param, (FloatDomain, IntDomain, ChoiceDomain)):
            problems.append(f"{path}: needs a domain ({{float: ...}}, {{choice: ...}})")
        elif param.when:
            problems.append(f"{path}.when: conditions are not supported in mutations")
        else:
            section = PBT_MUTABLE[bare]
            found = list(check_value(path, bare, known_fields(section)[bare], param))
            problems += found or list(check_rule(path, param, f"{section}.{bare}"))
    for param in spec.searched():
        if param.name in SHAPE_FIELDS:
            problems.append(f"{param.path}: a PBT population shares one shape (a member that "
                            "exploits copies the donor's weights), so shape fields must be "
                            "fixed values, not searched")
    ckpt = pbt.checkpoint_interval or pbt.perturbation_interval
    if pbt.perturbation_interval % ckpt:
        problems.append(f"search.pbt.checkpoint_interval: {ckpt} tokens does not divide "
                        f"perturbation_interval={pbt.perturbation_interval}; members could only "
                        "exploit a stale checkpoint")
    budget_name, budget = spec.budget()
    if budget_name == "tokens" and is_num(budget) and pbt.perturbation_interval >= budget:
        problems.append(f"search.pbt.perturbation_interval: {pbt.perturbation_interval} tokens "
                        f"is not below the budget train.tokens={budget}; no member would ever "
                        "be perturbed")
    elif budget_name != "tokens":
        problems.append(f"train.{budget_name}: pbt intervals are in tokens, so the budget must "
                        "be train.tokens")
    return problems
