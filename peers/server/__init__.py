"""A server process the run starts or watches: the process itself, its log read as events, the acceptance and KV
metrics it exports (in every server's format), a server that stops answering, and the one line that says why it
failed a run. Talks to no endpoint's API, so the client side can build on it."""
