"""The gateway's benchmark: what pact-gateway costs on top of the bot it protects.

``python -m bench --quick`` (under two minutes) or ``python -m bench`` (the full run quoted in
docs/performance.md). Every measured party runs in its own process so its CPU can be read
from ``/proc``: the sample bot, a bare pass-through forwarder (the design's ceiling), the
gateway on the memory store and on Redis, and one aiohttp load generator. Nothing here is
part of the gateway; it only drives the real CLI from the outside.

``python -m bench soak`` (:mod:`bench.soak`) is the other use of the same parts: the gateway under
steady load for a while, its memory and file descriptors read before and after against stated bounds.
"""
