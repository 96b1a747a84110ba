"""Kafka's own wire protocol, sans-IO: request frames decoded with kio (Kafka's JSON schemas as
Python classes) and translated to and from the broker's internal requests."""
