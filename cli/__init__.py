"""Command-line interface: `specdec-eval ...` (Typer)."""
