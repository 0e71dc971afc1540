"""Decoupled PPO (AReaL): asynchronous sampling up to 4 versions stale, 4 optimiser updates per
batch (minibatches), the trust region centred on the proximal policy (the parameters at the start
of each learner step) and the behaviour weight pi_prox / mu on every token.

    python -m launch.train --config=configs/decoupled_ppo.py --workdir=workdir/decoupled
"""

from configs import default


def get_config():
    c = default.base()
    c.scheduler.update(mode="async")
    c.admission.max_version_gap = 4
    c.loss.update(name="decoupled_ppo", filter="none")
    c.loss.decoupled_ppo = dict(behavior_cap=5.0)  # AReaL's optional cap; the clip is the paper's
    c.optim.minibatches = 4
    return c
