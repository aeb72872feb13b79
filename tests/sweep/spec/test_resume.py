"""Resuming under a changed spec: a changed step is refused like changed choices."""

import pytest

from sweep.spec.resume import ResumeError, check_resume_compatible

OLD = {"name": "t", "data": "builtin:python-stdlib",
       "model": {"d_model": {"int": [64, 256]}, "dropout": {"float": [0.0, 0.2]}},
       "train": {"tokens": 100000, "lr": {"float": [1e-4, 1e-2], "step": 1e-4}}}


def changed(section, name, value):
    return {**OLD, section: {**OLD[section], name: value}}


@pytest.mark.parametrize(("section", "name", "value", "shown"), [
    ("model", "d_model", {"int": [64, 256], "step": 64}, "step 1 to 64"),
    ("model", "dropout", {"float": [0.0, 0.2], "step": 0.05}, "step none (continuous) to 0.05"),
    ("train", "lr", {"float": [1e-4, 1e-2]}, "step 0.0001 to none (continuous)"),
    ("train", "lr", {"float": [1e-4, 1e-2], "step": 2e-4}, "step 0.0001 to 0.0002"),
])
def test_a_changed_step_is_refused_naming_the_field(section, name, value, shown):
    with pytest.raises(ResumeError) as info:
        check_resume_compatible(OLD, changed(section, name, value))
    assert f"cannot resume: {section}.{name} changed {shown}" in str(info.value)


def test_a_changed_range_with_the_same_step_is_a_note():
    notes = check_resume_compatible(OLD, changed("model", "d_model", {"int": [64, 512]}))
    assert len(notes) == 1 and notes[0].startswith("model.d_model domain")
    assert check_resume_compatible(OLD, changed("model", "d_model", {"int": [64, 256],
                                                                     "step": 1})) == []
