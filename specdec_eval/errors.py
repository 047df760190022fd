"""Errors a user can cause. The CLI turns them into one line and exit status 2."""


class UserError(Exception):
    """Bad input from the user: a path, a config value, a flag. The message is shown as is, on one line."""
