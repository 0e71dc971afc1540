"""A tiny mixture-of-experts model with routing replay (R3) on the default task.

4 experts, top-2 routing in every layer. The sampler records the experts it chose at every
position (``Trajectory.routes``); the learner replays them (``batch["routes"]``) instead of routing
again, so the learner scores exactly the computation that produced each token: with exact kernels
the ratio is still exactly 1, as for the dense model (``docs/consistency.md``, MoE table).

    python -m launch.train --config=configs/moe.py --workdir=workdir/moe
"""

from configs import default


def get_config():
    c = default.base()
    c.model.update(n_experts=4, n_experts_per_token=2, d_ff=128)
    return c
