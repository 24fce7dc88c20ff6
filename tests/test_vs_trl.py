"""bench/vs_trl.py's precision setting: one switch that changes both sides alike."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import vs_trl  # noqa: E402

pytest.importorskip("trl")


@pytest.mark.parametrize("native", [True, False])
def test_precision_auto_gives_both_sides_bf16_exactly_where_the_cpu_has_it(tmp_path, monkeypatch, native):
    monkeypatch.setattr("rlyard.models.loading.native_bf16", lambda device: (native, "test"))
    plain, auto = vs_trl.parse_args([]), vs_trl.parse_args(["--precision", "auto"])
    assert plain.precision == "float32" and not vs_trl.trl_bf16(plain)
    assert vs_trl.trl_bf16(auto) is native
    config = vs_trl.run_config(plain, tmp_path)
    assert config.model.autocast == "none" and config.rollout.dtype is None
    config = vs_trl.run_config(auto, tmp_path)
    assert config.model.autocast == "auto" and config.rollout.dtype == "auto"  # rlyard resolves auto by the same test
    trl_config = vs_trl.grpo_config(str(tmp_path), 0, 2, 8, 32, 8, 0.7, 5e-4, bf16=vs_trl.trl_bf16(auto))
    assert trl_config.bf16 is native
    assert "--precision" in vs_trl.passthrough(auto) and "auto" in vs_trl.passthrough(auto)  # the per-seed children too
