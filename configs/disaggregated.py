"""Disaggregated placement: learner and sampler on disjoint device sub-meshes, weight sync every k.

The learner takes the first 4 devices (``fsdp=4``), the sampler the next 4 (``data=2, tensor=2``);
after every ``placement.sync_every``-th learner step the new parameters are resharded onto the
sampler mesh (timed and byte-counted in ``summary.json`` under ``weight_sync``). Between syncs the
sampler keeps older weights, and every token records the version it was really sampled with.

Needs 8 devices (a TPU v5e-8 / v6e-8 host, 8 GPUs). On a CPU-only host, ``placement.host_devices=8``
makes ``launch.train`` ask XLA for 8 host devices before JAX starts (it only affects the host
platform; the config itself changes no process state):

    python -m launch.train --config=configs/disaggregated.py --workdir=workdir/disaggregated
    python -m launch.train --config=configs/disaggregated.py --config.placement.sync_every=4
"""

from configs import default


def get_config():
    c = default.base()
    c.placement = dict(
        kind="disaggregated",
        learner_mesh=dict(data=1, fsdp=4, tensor=1),
        sampler_mesh=dict(data=2, fsdp=1, tensor=2),
        sync_every=2,
        host_devices=8,
    )
    # The sampler may lag up to sync_every - 1 versions behind the learner on top of the
    # scheduler's queueing: keep the version-gap bound above that lag.
    c.admission.max_version_gap = 3
    return c
