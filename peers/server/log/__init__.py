"""A server's log as our events: one signature table per engine (`tables`, data), one matcher (`matcher`), and a
follower that reads the log from the server's start while the run goes (`follower`)."""

from ...profiles.signature import LogFormat, Signature
from .follower import AUTO, ServerLog, check_log_format, format_of_server
from .matcher import LogMatcher
from .tables import GENERIC, LOG_FORMATS

# What `--server-log-format` offers: "auto" (the server's identity, else the log's content), then each table.
LOG_FORMAT_NAMES = (AUTO, *LOG_FORMATS)

__all__ = [
    "AUTO",
    "GENERIC",
    "LOG_FORMATS",
    "LOG_FORMAT_NAMES",
    "LogFormat",
    "LogMatcher",
    "ServerLog",
    "Signature",
    "check_log_format",
    "format_of_server",
]
