import pytest
import torch

from models import ModelConfig
from sweep import hardware
from sweep.data import load_corpus
from sweep.trial import TrainConfig, Trainer


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


def test_bf16_autocast_trains_close_to_fp32(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        corpus = load_corpus("synthetic:markov?order=1&vocab=16&tokens=30000", tmp_path)
        model = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1)
        losses = {}
        for precision in ("fp32", "bf16"):
            trainer = Trainer(model, TrainConfig(steps=20, batch_size=8, precision=precision),
                              corpus)
            assert trainer.amp_dtype == (torch.bfloat16 if precision == "bf16" else None)
            losses[precision] = trainer.train().final_val_loss
        assert losses["bf16"] != losses["fp32"]
        assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    finally:
        torch.set_num_threads(before)


@pytest.mark.gpu
def test_cuda_trial_uses_bf16_and_reports_mfu(tmp_path):
    corpus = load_corpus("synthetic:markov?order=1&vocab=16&tokens=30000", tmp_path)
    model = ModelConfig(vocab_size=16, seq_len=32, d_model=32, n_heads=2, n_layers=1)
    trainer = Trainer(model, TrainConfig(steps=20, batch_size=8), corpus)
    assert trainer.device.type == "cuda"
    result = trainer.train()
    assert result.state == "COMPLETE"
    if trainer.peak_flops is not None:
        assert 0 < result.mfu < 1
