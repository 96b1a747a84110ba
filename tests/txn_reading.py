"""What a read_committed consumer keeps of a fetched partition, computed independently of our
client (Kafka's consumer algorithm), for the tests that check transactions over the wire."""

from __future__ import annotations

from triolog.protocol.records import iter_batches


def committed_values(part: dict) -> list[bytes]:
    """The values of a read_committed fetch answer's partition (``records`` and
    ``aborted_transactions``): a producer's transactional batches from an aborted transaction's
    first offset up to its marker are dropped, and control batches."""
    aborted = sorted((t["first_offset"], t["producer_id"]) for t in part["aborted_transactions"] or ())
    aborting: set[int] = set()
    values: list[bytes] = []
    for batch in iter_batches(part["records"]):
        header = batch.header
        while aborted and aborted[0][0] <= header.last_offset:
            aborting.add(aborted.pop(0)[1])
        if header.is_control:
            aborting.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborting):
            values += [r.value for r in batch.records]
    return values
