"""Kafka's log layer: synchronous file code with no trio, no sockets and no metrics library.

It takes a clock and returns stats objects; the server and the tasks turn those into I/O
scheduling and metrics.
"""
