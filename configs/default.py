"""The default run: a tiny model trained on the minirepo bug-fix task on a 2-core CPU.

Its values are :func:`agentjax.rundefaults.run_defaults` (read them there, with why each is
set): one set of defaults, which every other config (and ``runconfig.parse``) starts from, so a
config that sets part of a section keeps this run's other values.

    python -m launch.train                                   # this config
    python -m launch.train --config.rl.steps=200 --config.scheduler.mode=async
"""

import ml_collections

from agentjax import rundefaults


def get_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(rundefaults.run_defaults())
