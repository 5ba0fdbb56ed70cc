"""§3 personal-agent authentication: the JWT verifier and what it needs (keys, discovery, guards).

The HTTP layer uses :mod:`gateway.auth.pa_jwt`; the pure §3.2 rules are in
:mod:`gateway.protocol.claims`.
"""
