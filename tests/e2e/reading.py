"""Reading a whole partition back through the real client, as the end-to-end checks do."""

from __future__ import annotations

from triolog.client import Consumer, TopicPartition


def read_partition(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Every record of the partition from its log start to the end offset seen at the start."""
    tp = TopicPartition(topic, partition)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        records = []
        while consumer.position(tp) < end:
            records.extend(consumer.poll(1000).get(tp, []))
        return records
