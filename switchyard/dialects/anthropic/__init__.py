"""Anthropic's Messages API, inbound: ``wire`` holds the facts both directions share (stop reasons,
usage, error types, versions) as plain data; ``request`` reads a Messages body into the canonical
request; ``render`` answers as Anthropic does (``message`` objects, named SSE events, errors)."""
