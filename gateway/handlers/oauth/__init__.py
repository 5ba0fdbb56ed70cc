"""The §5 OAuth endpoints: aiohttp handlers over the RFC logic of :mod:`gateway.oauth`, which
never imports them."""
