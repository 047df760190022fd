"""Run store, comparisons, waives and reports."""
