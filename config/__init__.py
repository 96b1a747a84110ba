"""Typed, immutable configuration with Kafka's key names, defaults and precedence."""
