"""Environment steps for the process-pool test: a module that imports nothing heavy, so a spawned
worker starts in well under a second (importing the test module would import JAX)."""


def cpu_step(state, n):
    """A CPU-bound 'environment' whose state travels with the step (process pools)."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return state + [acc], len(state)


def broken_step():
    raise OSError("sandbox died")
