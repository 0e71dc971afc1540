"""A seconds-scale version of the default run (tiny sizes, on the virtual clock and lock-step
Rollout, so that a run is a pure function of its seed): used by the end-to-end, determinism and
SIGKILL-resume tests.

    python -m launch.train --config=configs/smoke.py --workdir=/tmp/smoke
"""

from configs import default


def get_config():
    c = default.base()
    c.model.update(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64)
    c.task.eval_tasks = 16
    c.warm_start.update(episodes=64, steps=10, batch_size=16)
    c.rl.update(steps=12, group_size=4, batch_size=16, eval_every=6)
    # dynamic sampling as the default; a budget of one batch: the 10-step warm start passes
    # almost nothing, so most groups are uniform and the budget path runs every step
    # the virtual clock and lock-step Rollout: the tests of this config check same seed = same
    # run and bitwise --resume (the real-time default has its own tests: tests/test_realtime.py)
    c.scheduler.update(num_slots=32, window=16, drop_budget=1, clock="virtual", engine_slots=0)
    c.checkpoint_every = 2
    c.log_every = 1
    return c
