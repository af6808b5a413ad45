"""The request pipeline: a request context, admission, routing and settling (one per request)."""
