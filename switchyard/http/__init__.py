"""The HTTP edge: ASGI handlers, the app, server and CLI, admin routes, console, logs, metrics."""
