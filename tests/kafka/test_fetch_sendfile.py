"""A Kafka Fetch's record bytes go from the segment file to the socket by sendfile, as the msgpack
listener's do: the response around them is written by kio, the records never pass through Python."""

from __future__ import annotations

import os

import trio

from triolog.protocol.kafka.schema import build, request_class

from tests.server.inprocess import Client, running_broker

from .kafka_wire import connect, decode_response, encode_request, read_frame

VALUE = b"s" * (512 * 1024)


async def test_fetched_records_are_sent_with_sendfile(tmp_path, monkeypatch):
    sent: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count):
        n = real_sendfile(out_fd, in_fd, offset, count)
        sent.append(n)
        return n

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    async with running_broker(tmp_path, kafka_listeners="PLAINTEXT://127.0.0.1:0") as (server, port):
        client = await Client.connect(port)
        assert (await client.create("big", 1, {"max.message.bytes": str(2 << 20)}))["error_code"] == 0
        for _ in range(4):
            assert (await client.produce("big", [VALUE], partition=0))["error_code"] == 0
        address = f"127.0.0.1:{server.kafka_context.port}"

        def fetch():
            body = build(request_class(1, 12), {
                "max_wait": 0, "min_bytes": 1, "max_bytes": 64 << 20, "session_epoch": -1,
                "topics": [{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 8 << 20}]}]})
            with connect(address) as sock:
                sock.sendall(encode_request(1, 12, 5, body))
                return decode_response(1, 12, read_frame(sock))

        correlation_id, response = await trio.to_thread.run_sync(fetch)
    (partition,) = response.responses[0].partitions
    assert correlation_id == 5 and int(partition.error_code) == 0 and partition.high_watermark == 4
    assert partition.records.count(VALUE) == 4  # the four batches, whole
    assert sum(sent) == len(partition.records)  # every record byte by sendfile
