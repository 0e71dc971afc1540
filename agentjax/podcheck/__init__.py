"""The pod check: the real learner and sampler programs compiled ahead of time for TPU topologies.

It sits above ``sharding``, ``learner`` and ``sampling`` because it builds the programs a run
executes (``make_train_step``, the sampler's prefill and decode) and compiles them on meshes of
abstract TPU devices; ``sharding`` keeps the meshes, rules, topologies and the reading of a
compiled program (``topology``, ``aot_report``, ``roofline``) and imports neither.
"""
