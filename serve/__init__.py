"""`specdec-eval serve`: our engine behind an OpenAI-compatible HTTP server (DESIGN.md, "Seams": Serving).

One engine loop (serve/engine_loop.py) owns the engine and steps it while any request is unfinished, so a request
that arrives while others decode joins the running batch at the next step. The ASGI app (serve/app.py, routes in
serve/routes.py) parses requests (serve/schemas.py), hands them to the loop, and answers in OpenAI's shapes
(serve/responses.py, serve/streaming.py); metrics go through prometheus_client (serve/metrics.py)."""
