"""`specdec-eval serve`: our engine behind an OpenAI-compatible HTTP server (docs/architecture.md, "Seams": Serving).

One engine loop owns the engine and steps it while any request is unfinished, so a request that arrives while
others decode joins the running batch at the next step. The ASGI app parses requests, hands them to the loop, and
answers in OpenAI's shapes; metrics go through prometheus_client."""
