"""launch.make_tiny_hf --copy_steps: the written checkpoint holds the copy-pretrained weights."""

import numpy as np

from agentjax.policy.hf import load_hf_checkpoint


def test_copy_steps_train_the_written_checkpoint_from_the_random_init(tiny_hf_dir, tmp_path, monkeypatch):
    from launch import make_tiny_hf  # noqa: PLC0415

    phases = [
        (share, 64, length, ctx, span, 4, code)
        for share, _, length, ctx, span, _, code in make_tiny_hf.COPY_PHASES
    ]
    monkeypatch.setattr(make_tiny_hf, "COPY_PHASES", tuple(phases))  # tiny batches: 2 steps per phase
    seen = []
    monkeypatch.setattr(make_tiny_hf, "copy_pretrain", _spy(make_tiny_hf.copy_pretrain, seen))
    out = make_tiny_hf.make(tmp_path / "copy", copy_steps=4)
    assert seen and len(seen[0]) == 4 and all(np.isfinite(seen[0]))  # every phase ran its steps
    (_, random_init), (_, trained) = load_hf_checkpoint(tiny_hf_dir), load_hf_checkpoint(out)
    assert (out / "tokenizer.json").read_bytes() == (tiny_hf_dir / "tokenizer.json").read_bytes()
    assert not np.allclose(random_init["embed"], trained["embed"])  # the same seed's init, trained


def _spy(fn, seen):
    def wrapped(*args, **kwargs):
        params, losses = fn(*args, **kwargs)
        seen.append(losses)
        return params, losses

    return wrapped
