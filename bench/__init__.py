"""The gateway's benchmark: ``python -m bench FRONT [options]``, one module a front (:mod:`bench.__main__`).

Nothing here is part of the gateway: it drives the real CLI from the outside, each party a process
of its own (:mod:`bench.procs`). Shared plumbing: :mod:`bench.procs`, :mod:`bench.loadgen` (the
load), :mod:`bench.harness` (fronts, the gateway's configuration, options), :mod:`bench.figures`.
"""
