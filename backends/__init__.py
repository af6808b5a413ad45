"""Token producers behind the gateway: upstream providers and the built-in engine."""
