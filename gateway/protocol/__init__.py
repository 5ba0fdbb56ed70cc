"""Pure PACT 1.0 rules: no I/O, no framework types, one module per concern of the spec."""
