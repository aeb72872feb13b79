"""Study specs: the YAML a user writes, validated once into a `StudySpec`.

A spec has the sections ``name``, ``description``, ``data``, ``model``, ``train``, ``search``,
``constraints``, ``resources`` and ``tracking``, and the section of its study kind if it has one
(``scaling``, ``transfer``, ``search.pbt``: `sweep.kinds`). In ``model`` and ``train`` every key is
a `ModelConfig` / `TrainConfig` field (plus the derived model keys ``preset``, ``d_head`` and
``d_ff_ratio``) and every value is either fixed or a domain::

    d_model: {int: [64, 256], step: 64}          # ints, optionally log: true (then step 1)
    lr: {float: [1.0e-4, 3.0e-3], log: true}      # floats, optionally step: x
    attn_pattern: {choice: [dense, local]}        # any values
    attn_sparsity: {float: [0.3, 0.9], when: {attn_pattern: [local, strided]}}
    lr: {from_study: hparams-cpu, width: 2}       # train.lr only: sweep.spec.from_study

A domain with ``when`` is only sampled while every named field (same section unless dotted,
``train.lr``) takes one of the listed values; otherwise the field keeps its config default.
``d_head`` sets ``n_heads = d_model / d_head`` and ``d_ff_ratio`` sets
``d_ff = round(d_ff_ratio * d_model)``, so the space holds only valid shapes.

A file over 1 MB is refused unread; YAML aliases, object tags and keys given twice are refused with
their line; every fixed value, choice and range bound is checked against its field's rule
(`sweep.spec.fields.FIELD_RULES`). Every problem is reported with its dotted path
(``search.sampler``, ``model.d_model.float[1]``) in one `SpecError`, one line per problem. Modules,
imported one way only: ``fields`` <- ``domains`` <- ``sections`` <- ``schema`` <- ``values`` <-
``shape_rules`` <- ``rules`` <- ``loader``. The translation of a spec into sampler calls lives in
`sweep.space`; this package only says what a valid spec is.
"""

from sweep.spec.domains import (
    ChoiceDomain,
    Domain,
    FloatDomain,
    FromStudyDomain,
    IntDomain,
    LrLaw,
    Param,
    SpecParam,
)
from sweep.spec.fields import DERIVED_MODEL_KEYS, OBJECTIVES, PBT_MUTABLE, SHAPE_FIELDS
from sweep.spec.loader import SpecError, load_spec, parse_spec, spec_hash
from sweep.spec.schema import (
    ConstraintsSpec,
    DataSpec,
    ResourcesSpec,
    SearchSpec,
    Section,
    StudySpec,
    TrackingSpec,
)

__all__ = [
    "DERIVED_MODEL_KEYS",
    "OBJECTIVES",
    "PBT_MUTABLE",
    "SHAPE_FIELDS",
    "ChoiceDomain",
    "ConstraintsSpec",
    "DataSpec",
    "Domain",
    "FloatDomain",
    "FromStudyDomain",
    "IntDomain",
    "LrLaw",
    "Param",
    "ResourcesSpec",
    "SearchSpec",
    "Section",
    "SpecError",
    "SpecParam",
    "StudySpec",
    "TrackingSpec",
    "load_spec",
    "parse_spec",
    "spec_hash",
]
