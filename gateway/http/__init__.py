"""The shared HTTP edge: connections, request ids, the error middleware and bare answers, and what
handling notes on a request; no handler and no service (those are in :mod:`gateway.handlers`)."""
