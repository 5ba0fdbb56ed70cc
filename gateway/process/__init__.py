"""The process around the app: serving it (one process or a supervisor and workers), the ops
listener (metrics, health, the admin API), reloading its configuration, and the operations an
operator runs on it (erasing a person's records, probing its dependencies).

These modules build and drive :func:`gateway.app.create_app`, or reach every store and bot
adapter, so they sit above it; the primitives the app's handlers use (metrics, logs, limits,
tracing) stay in :mod:`gateway.ops` below it.
"""
