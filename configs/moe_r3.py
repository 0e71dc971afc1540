"""MoE with a bf16 sampler and Rollout Routing Replay (R3).

The bf16 sampler's router can pick other experts than the f32 learner's would for the same
token; with ``sampler.replay_routes=True`` the learner replays the sampler's experts, so
``routing/mismatch`` is 0; ``--config.sampler.replay_routes=False`` lets the learner route
again and the metric shows how often the experts differ.

    python -m launch.train --config=configs/moe_r3.py --workdir=workdir/moe_r3
"""

from configs import moe


def get_config():
    c = moe.get_config()
    c.model.exact_tile = 0
    c.sampler.update(compute_dtype="bfloat16", head_dtype="bfloat16", replay_routes=True)
    return c
