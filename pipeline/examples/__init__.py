"""Runnable examples of the triolog data source (see windowed_totals.py)."""
