"""Small helpers the client tests share."""

from __future__ import annotations


def flat(polled: dict) -> list:
    """poll()'s {TopicPartition: [records]} as one list, in the order poll handed them out."""
    assert isinstance(polled, dict), f"poll() must return a dict by partition, got {type(polled).__name__}"
    return [record for records in polled.values() for record in records]
