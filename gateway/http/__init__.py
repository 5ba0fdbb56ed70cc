"""HTTP edge: routes, handlers and middlewares that compose the protocol rules, auth, store and bots."""
