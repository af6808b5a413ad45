"""The kernel every layer imports: the canonical request and chunk, errors, config types, stops."""
