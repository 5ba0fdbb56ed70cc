"""The endpoints: A2A operations, cards, and the §5 OAuth endpoints, above the services they call.

They read the app's typed state (:mod:`gateway.handlers.state`, filled by :mod:`gateway.app`)
and answer through the shared edge (:mod:`gateway.http`); nothing below imports them.
"""
