"""What the app's handlers use around a request: metrics, logs, limits, tracing, probes.

The process around the app (serving, workers, the ops listener, reload) is :mod:`gateway.process`.
"""
