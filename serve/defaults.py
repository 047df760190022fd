"""The server's defaults, in one light module (the command's options read them without importing the server)."""

DEFAULT_HOST = "127.0.0.1"  # never every interface unless asked
DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 1024  # requests held at once (running + waiting); more get 503
DEFAULT_MAX_REQUEST_SIZE = "1MiB"  # request bodies above it get 413
DEFAULT_GRACE_S = 20.0  # below torchrun's 30 s between its SIGTERM and SIGKILL of a job's ranks
BACKSTOP_S = 5.0  # after the grace period, how long aborted requests may take to close before uvicorn cancels them
API_KEY_ENV = "SPECDEC_EVAL_API_KEY"  # --api-key's variable; also how a torchrun job's rank 0 gets the key
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's (config.LOG_LEVELS)
