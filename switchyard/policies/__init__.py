"""Keys, limits, quotas, usage accounting and token counting."""
