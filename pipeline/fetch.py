"""Task-side reading: fetch one partition's offset range over TCP and hand it to Spark as Arrow.

Runs in a Spark Python worker; the connection is opened here, never pickled. Arrow record
batches rather than row tuples: Spark converts tuples one Python object at a time (~150k rows/s
measured here), while a RecordBatch goes to the JVM as columns.

Offsets missing from the broker's log are told apart as Kafka does:

* below the partition's log start offset (retention or delete_records removed them), or past
  its end (the log is shorter than planned): *data loss*, an error naming topic, partition and
  range unless ``failOnDataLoss`` is false, then skipped;
* inside the log (compaction removed records, or a control batch took the offset): normal, the
  reader steps over them.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from triolog.client.connection import ClusterConnection
from triolog.client.consumer_core import ConsumerConfig, list_offsets_op
from triolog.client.errors import CorruptMessageError, TriologClientError, error_for
from triolog.client.ops import check_response, run_sync
from triolog.client.types import EARLIEST, LATEST, RecordColumns, TopicPartition
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .columnar import decode_into, next_position

__all__ = ["ARROW_SCHEMA", "ARROW_SCHEMA_WITH_HEADERS", "DataLossError", "read_range"]

log = logging.getLogger(__name__)

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS = pa.list_(pa.field("element", _HEADER))
_TIMESTAMP = pa.timestamp("us", tz="UTC")
#: Spark's Arrow form of the Kafka source schema (every field nullable, as Spark declares it).
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", _HEADERS))


class DataLossError(RuntimeError):
    """Offsets a query had to read are gone from the broker (failOnDataLoss=true)."""


def data_loss(topic: str, partition: int, first: int, last: int, reason: str, fail: bool) -> None:
    """Fail (or, with failOnDataLoss=false, log) the loss of offsets ``first``..``last``."""
    where = f"topic {topic!r} partition {partition}: offsets {first} to {last}"
    if fail:
        raise DataLossError(
            f"Data loss in {where} are no longer on the broker ({reason}). "
            "Set failOnDataLoss=false to skip records that were removed."
        )
    log.warning("skipping lost records in %s (%s); failOnDataLoss is false", where, reason)


def to_arrow(columns: RecordColumns, topic: str, partition: int, with_headers: bool) -> pa.RecordBatch:
    n = len(columns)
    timestamps_ms = _int64_array(columns.timestamps, n)
    arrays = [
        pa.array(columns.keys, pa.binary()),
        pa.array(columns.values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _int64_array(columns.offsets, n),
        pa.Array.from_buffers(_TIMESTAMP, n, [None, pc.multiply(timestamps_ms, 1000).buffers()[1]]),
        _types_array(columns.types, n),
    ]
    if with_headers:
        arrays.append(_headers_array(columns.headers))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_WITH_HEADERS if with_headers else ARROW_SCHEMA)


def _int64_array(values: list[int], n: int) -> pa.Array:
    """An int64 column from a list of ints through ``array.array`` (a C loop, about 2.5 times
    faster than ``pa.array``); both are native-endian, as Arrow's buffers are."""
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(array("q", values))])


def _types_array(types: list[int], n: int) -> pa.Array:
    """timestampType: one value per batch, so usually one value per fetch (no list conversion)."""
    if n and types.count(types[0]) == n:
        return pa.repeat(pa.scalar(types[0], pa.int32()), n)
    return pa.array(types, pa.int32())


def _headers_array(per_record: list) -> pa.Array:
    """Kafka's headers column: null for a record without headers (as Spark's Kafka source)."""
    offsets = [0]
    keys: list[str] = []
    values: list = []
    mask = []
    for headers in per_record:
        for key, value in headers:
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
        mask.append(not headers)
    structs = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(_HEADER)
    )
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), structs, type=_HEADERS, mask=pa.array(mask, pa.bool_())
    )


def _fetch(conn: ClusterConnection, config: ConsumerConfig, tp: TopicPartition, offset: int) -> dict:
    request = m.FetchRequest(
        id=0,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=config.fetch_max_bytes,
        topics=(
            m.FetchTopic(
                name=tp.topic,
                partitions=(
                    m.FetchPartition(
                        partition=tp.partition,
                        fetch_offset=offset,
                        partition_max_bytes=config.max_partition_fetch_bytes,
                    ),
                ),
            ),
        ),
    )
    response = conn.call(request, config.request_timeout_ms / 1000)
    assert response is not None  # (None is an acks=0 produce's)
    doc = check_response(response)
    return doc["topics"][0]["partitions"][0]


def read_range(
    bootstrap: str,
    config: ConsumerConfig,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    include_headers: bool,
    security=None,
) -> Iterator[pa.RecordBatch]:
    """The records of offsets [start, end) of one partition, one Arrow batch per fetch response.

    The next fetch is asked for (on a helper thread, the same connection) as soon as this one's
    batch headers say where it starts, so the broker and the socket work while this response is
    decoded and Spark consumes its batch.
    """
    tp = TopicPartition(topic, partition)
    conn = ClusterConnection(bootstrap, client_id=config.client_id, security=security)
    prefetch = ThreadPoolExecutor(1, thread_name_prefix=f"triolog-fetch-{topic}-{partition}")
    ahead = None  # (offset, future of its fetch response)
    try:
        position = start
        out_of_range_at = None
        while position < end:
            if ahead is not None and ahead[0] == position:
                answer = ahead[1].result()
            else:
                if ahead is not None:  # not where the decoder says the next fetch starts: unused
                    _settle(ahead[1])
                answer = _fetch(conn, config, tp, position)
            ahead = None
            code = answer["error_code"]
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                if out_of_range_at == position:  # list_offsets says in range, fetch says not: give up
                    raise error_for(code, answer.get("error_message"), topic=topic, partition=partition)
                out_of_range_at = position
                position = _out_of_range(conn, config, tp, position, end, fail_on_data_loss)
                continue
            if code:
                raise error_for(code, answer.get("error_message"), topic=topic, partition=partition)
            records = answer["records"]
            try:
                following = next_position(records, position)
            except Exception:  # bad framing: decode_into below says so
                following = position
            if position < following < end:
                ahead = (following, prefetch.submit(_fetch, conn, config, tp, following))
            columns = RecordColumns()
            try:
                next_pos = decode_into(records, columns, position, end, include_headers)
            except TriologClientError:
                raise
            except Exception as exc:  # protocol.errors.CorruptRecordError & co
                raise CorruptMessageError(
                    f"fetched data does not decode: {exc}", topic=topic, partition=partition
                ) from None
            if next_pos == position:  # no batch at or after the position
                high_watermark = answer["high_watermark"]
                if position >= high_watermark:  # the log ends before the planned end offset
                    data_loss(
                        topic,
                        partition,
                        position,
                        end - 1,
                        f"the log ends at offset {high_watermark}, before the planned end {end}",
                        fail_on_data_loss,
                    )
                    return
                raise CorruptMessageError(
                    f"fetch at offset {position} returned no whole record batch; "
                    f"raise triolog.max.partition.fetch.bytes?",
                    topic=topic,
                    partition=partition,
                )
            position = next_pos
            if len(columns):
                yield to_arrow(columns, topic, partition, include_headers)
    finally:
        if ahead is not None:  # let the fetch in flight finish before the connection closes
            _settle(ahead[1])
        prefetch.shutdown(wait=True)
        conn.close()


def _settle(fetch) -> None:
    """Wait for a fetch asked for ahead that will not be used; its outcome (even an error) is moot."""
    try:
        fetch.result()
    except Exception:
        pass


def _out_of_range(
    conn: ClusterConnection, config: ConsumerConfig, tp: TopicPartition, position: int, end: int, fail: bool
) -> int:
    """Where to continue after OFFSET_OUT_OF_RANGE at ``position`` (``end`` when nothing is left)."""
    timeout_s = config.request_timeout_ms / 1000
    log_start = run_sync(list_offsets_op({tp: EARLIEST}, timeout_s), conn)[tp].offset
    log_end = run_sync(list_offsets_op({tp: LATEST}, timeout_s), conn)[tp].offset
    if position < log_start:
        last = min(log_start, end) - 1
        data_loss(
            tp.topic,
            tp.partition,
            position,
            last,
            f"the log now starts at offset {log_start}: retention or delete_records removed them",
            fail,
        )
        return min(log_start, end)
    if position >= log_end:
        data_loss(
            tp.topic,
            tp.partition,
            position,
            end - 1,
            f"the log ends at offset {log_end}, before the planned end {end}",
            fail,
        )
        return end
    return position  # moved back into range meanwhile: fetch again
