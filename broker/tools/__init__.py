"""Offline command-line tools that read the broker's files (no running broker needed)."""
