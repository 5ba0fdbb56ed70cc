"""§3 personal-agent authentication: verifier, key sets, discovery, guards."""
