import pytest
import torch

from sweep.data import load_corpus
from sweep.schema import TrialState
from sweep.train import hardware
from sweep.train.trainer import TrainConfig, Trainer
from sweep_models import ModelConfig


@pytest.mark.parametrize(
    "name,dtype,peak",
    [
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.4e12),
        ("NVIDIA H100 PCIe", torch.bfloat16, 756.0e12),
        ("NVIDIA H200", torch.bfloat16, 989.4e12),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312.0e12),
        ("NVIDIA A100-SXM4-80GB", None, 19.5e12),
        ("NVIDIA GeForce GTX 1080", torch.bfloat16, None),
    ],
)
def test_peak_table_lookup(monkeypatch, name, dtype, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert hardware.peak_flops(torch.device("cuda"), dtype) == peak


def test_cpu_has_no_peak_and_auto_precision_is_fp32():
    cpu = torch.device("cpu")
    assert hardware.peak_flops(cpu, torch.bfloat16) is None
    assert hardware.autocast_dtype("auto", cpu) is None
    assert hardware.autocast_dtype("bf16", cpu) == torch.bfloat16
    assert hardware.pick_device("cpu") == cpu
    if not torch.cuda.is_available():
        assert hardware.pick_device("auto") == cpu
        with pytest.raises(ValueError, match="CUDA is not available"):
            hardware.pick_device("cuda")


def _train_recording_dtypes(trainer):
    """Train, recording the dtype of every logits tensor and MLP activation the model computes.

    Forward hooks see what autocast actually ran the matmuls in, whatever ``amp_dtype`` says.
    """
    seen = {"logits": set(), "mlp": set()}
    hooks = [
        trainer.model.lm_head.register_forward_hook(
            lambda _m, _i, out: seen["logits"].add(out.dtype)),
        trainer.model.blocks[0].mlp.c_fc.register_forward_hook(
            lambda _m, _i, out: seen["mlp"].add(out.dtype)),
    ]
    try:
        result = trainer.train()
    finally:
        for hook in hooks:
            hook.remove()
    return result, seen


def test_bf16_autocast_trains_close_to_fp32(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        corpus = load_corpus("synthetic:markov?order=1&vocab=16&tokens=30000", tmp_path)
        model = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1)
        losses = {}
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            trainer = Trainer(model, TrainConfig(steps=20, batch_size=8, precision=precision,
                                                 device="cpu"), corpus)
            result, seen = _train_recording_dtypes(trainer)
            assert seen == {"logits": {dtype}, "mlp": {dtype}}
            losses[precision] = result.final_val_loss
        assert losses["bf16"] != losses["fp32"]
        assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    finally:
        torch.set_num_threads(before)


@pytest.mark.gpu
def test_cuda_trial_uses_bf16_and_reports_mfu(tmp_path):
    corpus = load_corpus("synthetic:markov?order=1&vocab=16&tokens=30000", tmp_path)
    model = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1)
    trainer = Trainer(model, TrainConfig(steps=20, batch_size=8), corpus)  # precision auto
    assert trainer.device.type == "cuda"
    result, seen = _train_recording_dtypes(trainer)
    assert result.state == TrialState.COMPLETE
    # auto: bf16 autocast where the device supports it, plain fp32 where it does not
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    assert seen == {"logits": {dtype}, "mlp": {dtype}}
    name = torch.cuda.get_device_name(trainer.device)
    datasheet = {"H200": 989.4e12, "H100 PCIe": 756.0e12, "H100": 989.4e12, "A100": 312.0e12}
    known = next((peak for key, peak in datasheet.items() if key in name), None)
    if known is not None and dtype == torch.bfloat16:
        assert trainer.peak_flops == known
    if trainer.peak_flops is None:
        assert not any(key in name for key in hardware.PEAK_FLOPS)
        assert result.mfu is None
    else:
        assert 0 < result.mfu < 1
        # the training seconds MFU implies fit in the trial's wall time
        assert result.train_flops / (result.mfu * trainer.peak_flops) <= result.wall_s
