"""Starting the torchrun job and the per-rank entry point."""
