"""The field lists of a study spec, each defined once or read off where it is defined.

Derived model keys, the objectives a study can optimise, the fields population-based training
may change, the shape fields, corpus and storage schemes. The model fields with a fixed set of
values are read off `ModelConfig`'s ``Literal`` annotations by `sweep.spec.rules`.
"""

from __future__ import annotations

from sweep.data.corpus import SCHEMES
from sweep.schema import COST_METRICS, METRIC_VAL_LOSS
from sweep.train.config import LIVE_HPARAMS

__all__ = ["DATA_SCHEMES", "DERIVED_MODEL_KEYS", "OBJECTIVES", "PBT_MUTABLE",
           "RDB_SCHEMES", "SHAPE_FIELDS"]

#: Model keys a spec may give that are not `ModelConfig` fields: ``preset`` (a preset's
#: fields), ``d_head`` (``n_heads = d_model / d_head``), ``d_ff_ratio`` (``d_ff``), with the
#: type a spec gives each.
DERIVED_MODEL_KEYS: dict[str, type] = {"preset": str, "d_head": int, "d_ff_ratio": float}
#: Metrics a study can optimise: the val loss and the cost metrics every trial reports.
OBJECTIVES = (METRIC_VAL_LOSS, *COST_METRICS)
#: Fields population-based training may change on a live model (shape-preserving), with their
#: section: exactly what `sweep.train.Trainer.set_hparams` can change.
PBT_MUTABLE = LIVE_HPARAMS
#: Fields that fix parameter-tensor shapes or the data layout; PBT must never mutate them.
SHAPE_FIELDS = ("vocab_size", "seq_len", "d_model", "n_heads", "n_layers", "d_ff",
                *DERIVED_MODEL_KEYS, "activation", "norm", "bias", "tie_embeddings",
                "pos_encoding", "attn_pattern", "attn_sparsity", "attn_block_size", "causal",
                "batch_size")
#: Corpus URI schemes (`sweep.data`).
DATA_SCHEMES = SCHEMES
#: Database schemes an Optuna RDB storage URL may use.
RDB_SCHEMES = ("sqlite", "postgresql", "mysql")
