"""§5 PACT Delegated: the OAuth 2.0 authorization server of each delegating Brand, a module per concern.

The RFC rules and the server, importable without aiohttp's handler layer; the endpoints that serve
them are :mod:`gateway.handlers.oauth`.
"""
