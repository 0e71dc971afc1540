"""A noisy environment with a noise curriculum and retries of infrastructure faults.

Tool errors, timeouts, verifier crashes and environment crashes start at 0 and rise over 50 steps
to their caps while the smoothed batch success stays above 0.3 (and back off below 0.1). A
verifier or environment crash is an ``infra_fault``: masked (never a zero reward) and retried
with a fresh episode seed, at most 3 attempts per task and never a third time for the same root
cause. Groups whose members ran in different environments drop the odd ones
(``fingerprints.mode="group"``). Held-out evaluation stays clean.

    python -m launch.train --config=configs/noisy_env_curriculum.py --workdir=workdir/noisy
"""

from configs import default


def get_config():
    c = default.base()
    rates = dict(tool_error=0.0, timeout=0.0, verifier_crash=0.0, env_crash=0.0)
    caps = dict(tool_error=0.1, timeout=0.05, verifier_crash=0.2, env_crash=0.1)
    c.curriculum = dict(
        enabled=True,
        start=rates,
        cap=caps,
        ramp_steps=50,
        warmup_steps=0,
        gate=0.3,
        floor=0.1,
        backoff=0.1,
        decay=0.9,
    )
    c.faults = dict(rates={}, retry_max_attempts=3, retry_max_same_cause=2)
    c.rubric = dict(mode="evidence", weight=0.0)
    c.fingerprints = dict(mode="group")
    return c
