"""Saved models (`sweep.train.saved`): weights and config round-trip; nothing in a folder runs."""

import json
import sys

import pytest
import torch

from sweep.train.saved import (
    CONFIG_FILE,
    SAFETENSORS_FILE,
    TORCH_FILE,
    SavedModel,
    load_saved,
    read_saved_config,
    save_model,
)
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError
from sweep_models.transformer import build_model


def _model(**changes):
    torch.manual_seed(0)
    config = ModelConfig.from_preset("tiny", vocab_size=256, seq_len=16, **changes)
    return build_model(config), config


def _saved(config):
    return SavedModel(model=config, train={"lr": 1e-3}, data="builtin:python-stdlib",
                      byte_level=True, source={"preset": "tiny"}, result={"best_val_loss": 2.5})


def _same_logits(a, b):
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    a.eval()
    with torch.no_grad():
        assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("tie", [True, False])
def test_safetensors_round_trip_gives_the_same_logits(tmp_path, tie):
    module, config = _model(tie_embeddings=tie)
    written = save_model(tmp_path / "m", module, _saved(config))
    assert written.name == SAFETENSORS_FILE and not (tmp_path / "m" / TORCH_FILE).exists()
    loaded, saved = load_saved(tmp_path / "m")
    assert saved.model == config and saved.byte_level and saved.result["best_val_loss"] == 2.5
    assert not loaded.training
    _same_logits(module, loaded)


def test_without_safetensors_a_state_dict_loaded_with_weights_only(tmp_path, monkeypatch):
    module, config = _model()
    save_model(tmp_path / "m", module, _saved(config))  # safetensors first ...
    monkeypatch.setitem(sys.modules, "safetensors", None)  # ... then "not installed"
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    written = save_model(tmp_path / "m", module, _saved(config))
    assert written.name == TORCH_FILE
    assert not (tmp_path / "m" / SAFETENSORS_FILE).exists()  # one set of weights a folder
    loaded, _ = load_saved(tmp_path / "m")
    _same_logits(module, loaded)


class _Sneaky:
    def __reduce__(self):
        return (open, (str(_Sneaky.target), "w"))


def test_a_pickle_that_names_an_object_is_refused_and_never_runs(tmp_path, monkeypatch):
    module, config = _model()
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    save_model(tmp_path / "m", module, _saved(config))
    _Sneaky.target = tmp_path / "pwned"
    torch.save({"wte.weight": _Sneaky()}, tmp_path / "m" / TORCH_FILE)
    with pytest.raises(ConfigError, match="weights do not load"):
        load_saved(tmp_path / "m")
    assert not _Sneaky.target.exists()


def test_weights_of_another_shape_are_refused(tmp_path):
    module, config = _model()
    save_model(tmp_path / "m", module, _saved(config))
    other, _ = _model(d_model=32, n_heads=2)
    save_model(tmp_path / "other", other, _saved(other.config))
    (tmp_path / "m" / SAFETENSORS_FILE).write_bytes(
        (tmp_path / "other" / SAFETENSORS_FILE).read_bytes())
    with pytest.raises(ConfigError, match="weights do not load"):
        load_saved(tmp_path / "m")


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d.pop("format"), "not a model folder"),
    (lambda d: d.update(model="x"), "'model' must be a mapping"),
    (lambda d: d["model"].update(d_model=33), "d_model=33"),
    (lambda d: d["model"].update(bogus=1), "bogus"),
])
def test_a_bad_config_json_is_refused_naming_the_problem(tmp_path, edit, needle):
    module, config = _model()
    save_model(tmp_path, module, _saved(config))
    data = json.loads((tmp_path / CONFIG_FILE).read_text())
    edit(data)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=needle):
        read_saved_config(tmp_path)


def test_a_folder_without_weights_or_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        read_saved_config(tmp_path)
    module, config = _model()
    save_model(tmp_path, module, _saved(config))
    (tmp_path / SAFETENSORS_FILE).unlink()
    with pytest.raises(ConfigError, match="no weights"):
        read_saved_config(tmp_path)
