"""The inter-broker request codec against the listener's own decoder: what one broker sends is
what the other reads, and its answer reads back."""

from __future__ import annotations

import pytest

from triolog.protocol.frames import RemoteProtocolError
from triolog.protocol.kafka.apis import ApiKey
from triolog.protocol.kafka.inter_broker import decode_response, encode_request
from triolog.protocol.kafka.requests import decode_request, encode_response
from triolog.protocol.kafka.schema import build, response_class
from triolog.protocol.kafka.served import SERVED_VERSIONS


def test_write_txn_markers_reaches_the_listener_as_sent():
    frame = encode_request(ApiKey.WRITE_TXN_MARKERS, 1, 77, "broker-2", {"markers": [{
        "producer_id": 9, "producer_epoch": 4, "transaction_result": True, "coordinator_epoch": 3,
        "topics": [{"name": "t", "partition_indexes": [0, 2]}]}]})
    request = decode_request(frame[4:], SERVED_VERSIONS)
    assert (request.api_key, request.version, request.correlation_id, request.client_id) == (27, 1, 77, "broker-2")
    (marker,) = request.body.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (9, 4, True, 3)
    assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [("t", [0, 2])]


def test_the_answer_reads_back():
    body = build(response_class(ApiKey.WRITE_TXN_MARKERS, 1), {"markers": [{"producer_id": 9, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": 6}]}]}]})
    frame = b"".join(bytes(p) for p in encode_response(ApiKey.WRITE_TXN_MARKERS, 1, 77, body))
    correlation_id, decoded = decode_response(ApiKey.WRITE_TXN_MARKERS, 1, frame)
    assert correlation_id == 77
    assert int(decoded.markers[0].topics[0].partitions[0].error_code) == 6
    with pytest.raises(RemoteProtocolError):
        decode_response(ApiKey.WRITE_TXN_MARKERS, 1, frame[:9])
