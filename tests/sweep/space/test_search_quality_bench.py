"""``bench/search_quality.py --quick``: real training of a tiny space, every arm, one JSON line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow  # two --quick runs: 45 s and 10 s measured at load 11 on 2 cores
def test_the_quick_benchmark_compares_every_arm_at_equal_flops(tmp_path):
    cache = tmp_path / "curves.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "search_quality.py"), "--quick",
                           "--cache", str(cache)], capture_output=True, text=True, check=True,
                          timeout=600)
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert "| default |" in done.stdout and "| random |" in done.stdout
    results = line["results"]["4"]
    assert set(results) == {"random", "tpe", "tpe+median-old", "tpe+hyperband-old",
                            "tpe+median-w3", "tpe+median-w5", "tpe+hyperband-w3", "default"}
    baseline = line["baseline_unigram_loss"]
    for row in results.values():
        mean, lo, hi = row["best@1"]
        assert lo <= mean <= hi <= baseline
        assert row["trials_per_study"] >= 1
    assert results["random"]["pruned_frac"] == results["tpe"]["pruned_frac"] == 0
    # The warm-up holds in the benchmark as in the service: no prune at the first evaluation.
    assert results["default"]["pruned_first_frac"] == 0
    assert set(line["targets"]) == {"default_no_worse_than_tpe", "default_beats_median_old",
                                    "default_never_prunes_at_first_eval"}
    assert line["targets"]["default_never_prunes_at_first_eval"] is True
    # A second run reads every curve from the cache: nothing is trained again.
    again = subprocess.run([sys.executable, str(ROOT / "bench" / "search_quality.py"), "--quick",
                            "--cache", str(cache)], capture_output=True, text=True, check=True,
                           timeout=600)
    assert json.loads(again.stdout.strip().splitlines()[-1])["configs_trained"] == 0
