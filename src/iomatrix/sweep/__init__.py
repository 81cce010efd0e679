"""The parts of running a sweep, apart from the sweep runner's own loop (``iomatrix.runner``).

- ``expansion``: what a plan expands to on this host (backing facts, workloads, the cells and
  units).
- ``units``: the units' scheduling state, their races and twins, their offered loads, the scheduler
  of a session.
- ``rounds``: the round loop: the scheduler's batches, retries of disturbed runs, the session's
  counts.
- ``batch``: one batch of runs: the host made ready and sampled, the tier run, every finished run
  stored.
- ``host``: the host around a batch (caches, sampler, interference verdict) and SIGTERM as Ctrl-C.
- ``boots``: what shared guest boots cost, for choosing the rounds per boot.
- ``session``: the records a sweep passes between these parts (its result, a run to start, a
  session).
- ``progress``: what the runner tells the user.
"""
