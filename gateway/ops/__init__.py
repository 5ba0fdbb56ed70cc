"""What the app's handlers use around a request: metrics, logs, limits, tracing.

The process around the app (serving, workers, the ops listener, reload, erasure, probes) is
:mod:`gateway.process`; the access line is :mod:`gateway.handlers.access`.
"""
