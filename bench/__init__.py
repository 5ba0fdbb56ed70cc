"""The gateway's benchmark: ``python -m bench FRONT [options]``, one module a front (:mod:`bench.__main__`).

Every measured party runs in its own process so its CPU can be read from ``/proc``; nothing here is
part of the gateway: it drives the real CLI from the outside. Shared plumbing: :mod:`bench.procs`
(children, CPU, clusters), :mod:`bench.loadgen` (the load), :mod:`bench.harness` (fronts and the
gateway's configuration), :mod:`bench.figures` (figures beside targets). Its Redis calls are redis-py's.
"""
