"""Coordinators: what the broker decides for many clients at once (producer ids, consumer groups); pure, no network."""
