"""§5 PACT Delegated: the OAuth 2.0 authorization server of each delegating Brand, a module per concern."""
