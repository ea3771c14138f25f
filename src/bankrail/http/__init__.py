"""Area-neutral HTTP plumbing: auth dependencies, problem answers, middleware, metrics,
OpenAPI, health and request limits."""
