"""Speculative decoding: the Eagle3 draft head, verification, and the exception-safe spec-dec workers."""
