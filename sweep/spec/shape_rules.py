"""The rules on a spec's shapes: that the space can build a model at all.

Checked exactly over the values each field can take (ranges as arithmetic progressions, not
samples): some ``d_model`` divisible by some head count (with an even head dimension for RoPE,
an even width for sinusoidal positions), every ``n_kv_heads`` value dividing some ``n_heads``,
muP and CompleteP given their base shape (and, while ``d_model`` varies, a ``d_ff`` that
follows it: ``d_ff_ratio``), attention sparsity only where the pattern is sparse, and the
encoder-decoder fields only where ``arch`` can be ``encoder_decoder``, usable there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sweep.spec.domains import ChoiceDomain, FloatDomain, IntDomain
from sweep.spec.fields import ARCH_FIELDS
from sweep.spec.values import candidates, is_int, is_num, section_defaults

if TYPE_CHECKING:
    from sweep.spec.schema import StudySpec

__all__ = ["shape_problems"]


def shape_problems(spec: StudySpec) -> list[str]:
    """Every shape rule ``spec`` breaks, one line each."""
    return [*_check_shapes(spec), *_check_kv_heads(spec), *_check_parametrization(spec),
            *_check_arch(spec)]


def _int_values(param: Any, default: Any) -> tuple[int, int, int] | list[Any]:
    """A shape field's possible values: (lo, step, count) for int ranges, else a list."""
    if isinstance(param, IntDomain):
        lo, hi = param.bounds
        prog = (lo, param.step, (hi - lo) // param.step + 1)
        return prog if not param.when else [*param.values()[:4096], default]
    values = candidates(param) if param is not None else [default]
    return [*values, default] if getattr(param, "when", None) else values


def _has_multiple(values: tuple[int, int, int] | list[Any], m: int, at_least: int) -> bool:
    """Whether some value v >= at_least is divisible by m (arithmetic for ranges)."""
    if isinstance(values, list):
        return any(is_int(v) and v % m == 0 and v >= at_least for v in values)
    lo, step, count = values
    hi = lo + step * (count - 1)
    # solve lo + k*step = 0 (mod m) for the smallest k >= 0
    g = math.gcd(step, m)
    if lo % g:
        return False
    mg = m // g
    k = ((-lo // g) * pow(step // g, -1, mg)) % mg if mg > 1 else 0
    first = lo + k * step
    if first < at_least:
        first += math.ceil((at_least - first) / (mg * step)) * mg * step
    return first <= hi


def _check_shapes(spec: StudySpec) -> list[str]:
    """Reject a space in which no (d_model, heads, position encoding) combination is valid."""
    model = spec.model
    defaults = section_defaults(spec, "model")
    d_model = _int_values(model.get("d_model"), defaults["d_model"])
    pos = _int_values(model.get("pos_encoding"), defaults["pos_encoding"])
    by_head_dim = "d_head" in model
    heads = _int_values(model.get("d_head") if by_head_dim else model.get("n_heads"),
                        None if by_head_dim else defaults["n_heads"])
    if isinstance(heads, tuple):
        lo, step, count = heads
        heads = list(range(lo, lo + step * min(count, 4096), step))
    problems = []
    valid = False
    for h in heads:
        if not is_int(h) or h <= 0:
            continue
        for p in pos:
            if by_head_dim:
                if p == "rope" and h % 2:
                    continue
                m = math.lcm(h, 2) if p == "sinusoidal" else h
                ok = _has_multiple(d_model, m, h)
            else:
                m = 2 * h if p == "rope" else math.lcm(h, 2) if p == "sinusoidal" else h
                ok = _has_multiple(d_model, m, 1)
            if ok:
                valid = True
                break
        if valid:
            break
    if not valid:
        head = "model.d_head" if by_head_dim else "model.n_heads"
        problems.append(
            f"{head}: no value of model.d_model is divisible by any {head.split('.')[1]} of "
            f"the space (with an even head dimension for rope, an even d_model for "
            f"sinusoidal); the space can never produce a valid model")
    patterns = candidates(model.get("attn_pattern", defaults["attn_pattern"]))
    sparsity = model.get("attn_sparsity")
    if sparsity is not None and "dense" in patterns and not _sparsity_conditioned(sparsity):
        if any(is_num(v) and v > 0 for v in candidates(sparsity)):
            problems.append(
                "model.attn_sparsity: takes values > 0 while model.attn_pattern can be 'dense' "
                "(which keeps every pair); add when: {attn_pattern: [local, strided, "
                "block_sparse]}")
    return problems


def _listed(values: tuple[int, int, int] | list[Any]) -> list[Any]:
    """`_int_values` as a list (a range's first 4096 values)."""
    if isinstance(values, list):
        return values
    lo, step, count = values
    return list(range(lo, lo + step * min(count, 4096), step))


def _check_kv_heads(spec: StudySpec) -> list[str]:
    """Refuse an n_kv_heads value that divides no n_heads of the space (it never builds).

    A kind that sets the heads of every trial (a scaling study) refuses n_kv_heads itself.
    """
    model = spec.model
    if "n_kv_heads" not in model or "n_kv_heads" in spec.kind.owned_model_fields:
        return []
    defaults = section_defaults(spec, "model")
    if "d_head" in model:
        # n_heads = d_model / d_head is divisible by k when d_model is by k * d_head
        d_model = _int_values(model.get("d_model"), defaults["d_model"])
        d_heads = [h for h in _listed(_int_values(model["d_head"], None)) if is_int(h) and h > 0]

        def divides_some(k: int) -> bool:
            return any(_has_multiple(d_model, k * h, 1) for h in d_heads)
        where = "n_heads = d_model / d_head of the space"
    else:
        heads = [h for h in _listed(_int_values(model.get("n_heads"), defaults["n_heads"]))
                 if is_int(h) and h > 0]

        def divides_some(k: int) -> bool:
            return any(h % k == 0 for h in heads)
        shown = ", ".join(map(str, heads[:8])) + (", ..." if len(heads) > 8 else "")
        where = f"value of model.n_heads ({shown})"
    param = model["n_kv_heads"]
    label = ("value" if not isinstance(param, (ChoiceDomain, FloatDomain, IntDomain))
             else "choice" if isinstance(param, ChoiceDomain) else "range value")
    for k in _listed(_int_values(param, None)):
        if is_int(k) and k > 0 and not divides_some(k):
            return [f"model.n_kv_heads: {label} {k} divides no {where}; n_heads must be "
                    "divisible by n_kv_heads (each key/value head serves the same number of "
                    "query heads)"]
    return []


def _check_parametrization(spec: StudySpec) -> list[str]:
    """Refuse a space that can take muP or CompleteP without their base shape."""
    model = spec.model
    defaults = section_defaults(spec, "model")
    taken = candidates(model.get("parametrization", defaults["parametrization"]))
    problems = []
    for name, needed_by, what in (("base_d_model", ("mup", "completep"), "width"),
                                  ("base_n_layers", ("completep",), "depth")):
        needing = [p for p in taken if p in needed_by]
        if needing and None in candidates(model.get(name, defaults[name])):
            problems.append(f"model.{name}: parametrization {needing[0]!r} needs {name}, the "
                            f"{what} the hyperparameters are tuned at; give it")
    return problems + _check_fixed_d_ff(spec, [p for p in taken if p in ("mup", "completep")])


def _check_fixed_d_ff(spec: StudySpec, width_scaled: list[Any]) -> list[str]:
    """Refuse a ``d_ff`` of its own while ``d_model`` varies under muP or CompleteP.

    Their multipliers take every hidden width as ``d_model / base_d_model`` times the base's
    (Yang et al. 2022, "Tensor Programs V", Table 3: a matrix's width multiplier is its fan-in
    over the base's); a ``d_ff`` that does not follow ``d_model`` gives the feed-forward
    weights the wrong multipliers. ``d_ff_ratio`` keeps ``d_ff`` in proportion.
    """
    model = spec.model
    d_ff = model.get("d_ff")
    if not width_scaled or d_ff is None or len(set(candidates(model.get("d_model")))) < 2:
        return []
    when = getattr(d_ff, "when", None) or {}
    allowed = when.get("parametrization", when.get("model.parametrization"))
    if allowed is not None and not set(allowed) & set(width_scaled):
        return []
    shown = f"d_ff={d_ff}" if not isinstance(d_ff, (ChoiceDomain, FloatDomain, IntDomain)) \
        else "a d_ff domain of its own"
    return [f"model.d_ff: {shown} while model.d_model varies breaks parametrization "
            f"{width_scaled[0]!r} (the feed-forward width no longer scales with d_model, so "
            "its weights get the wrong multipliers); use model.d_ff_ratio so d_ff scales "
            "with d_model"]


def _arch_conditioned(param: Any) -> bool:
    when = getattr(param, "when", None) or {}
    allowed = when.get("arch", when.get("model.arch"))
    return allowed is not None and "decoder_only" not in allowed


def _check_arch(spec: StudySpec) -> list[str]:
    """The encoder-decoder fields only where ``arch`` can be ``encoder_decoder``, and usable.

    Refused: ``n_encoder_layers``, ``n_decoder_layers`` or ``src_len`` in a space whose
    ``arch`` is never ``encoder_decoder``, or can also be ``decoder_only`` without a ``when``
    that keeps the field to encoder-decoder trials; and, where every trial is encoder-decoder,
    a ``src_len`` never below ``seq_len``, ``causal: false``, no dense ``attn_pattern`` or
    only ``completep`` (no such trial could build).
    """
    model = spec.model
    defaults = section_defaults(spec, "model")
    archs = candidates(model.get("arch", defaults["arch"]))
    problems = []
    for name in ARCH_FIELDS[1:]:
        if name not in model:
            continue
        if "encoder_decoder" not in archs:
            problems.append(f"model.{name}: needs model.arch: encoder_decoder (a decoder-only "
                            "model has one stack and no source part)")
        elif "decoder_only" in archs and not _arch_conditioned(model[name]):
            problems.append(f"model.{name}: set while model.arch can be 'decoder_only', which "
                            "refuses it; add when: {arch: [encoder_decoder]}")
    if problems or archs != ["encoder_decoder"]:
        return problems
    if "src_len" in model:
        src = [v for v in candidates(model["src_len"]) if is_int(v)]
        seq = [v for v in candidates(model.get("seq_len", defaults["seq_len"])) if is_int(v)]
        if src and seq and min(src) >= max(seq):
            problems.append(f"model.src_len: {min(src)} is not below any model.seq_len of the "
                            f"space (at most {max(seq)}); src_len must be below seq_len (the "
                            "window is src_len source tokens, then the target)")
    for name, ok, rule in (
            ("causal", lambda v: v is True, "needs causal: true (its decoder is causal)"),
            ("attn_pattern", lambda v: v == "dense", "supports only attn_pattern: dense"),
            ("parametrization", lambda v: v != "completep", "supports sp and mup, not "
                                                             "completep")):
        values = candidates(model.get(name, defaults[name]))
        if not any(ok(v) for v in values):
            problems.append(f"model.{name}: arch 'encoder_decoder' {rule}; no trial of the "
                            "space could build")
    return problems


def _sparsity_conditioned(param: Any) -> bool:
    when = getattr(param, "when", None) or {}
    allowed = when.get("attn_pattern", when.get("model.attn_pattern"))
    return allowed is not None and "dense" not in allowed
