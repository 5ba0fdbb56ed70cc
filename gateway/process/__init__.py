"""The process around the app: serving it (one process or a supervisor and workers), the ops
listener (metrics, health, the admin API), and reloading its configuration.

These modules build and drive :func:`gateway.app.create_app`, so they sit above it; the
primitives the app's handlers use (metrics, logs, access lines, limits, tracing) stay in
:mod:`gateway.ops` below it.
"""
