"""Hypothesis stateful tests of the wire protocol against the real broker process.

A model holds what every partition must contain (records with offsets, timestamps, keys, values,
headers; log start offset; high watermark). Rules create and delete topics (valid and invalid
names, partition counts, configs), produce valid batches of every codec and malformed ones,
send malformed requests, fetch, list offsets and delete records; each checks the broker's
answer against the model. Invariants: every response is well-formed for its API (our client's
strict schema check), bad input gets the error code of protocol/errors.py and changes nothing,
acknowledged records are fetched back exactly, and the same connection stays usable throughout.

The cleaner is disabled (compacted topics keep every record, so the model stays exact; the
cleaner has its own tests) and topics are never auto-created.
"""

from __future__ import annotations

import itertools
import struct
import time

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import CompressionType
from triolog.protocol.records import Record, encode_batch, iter_batches

from tests.e2e.broker_process import BrokerProcess

E = ErrorCode
NAMES = ("a", "b", "c.d", "c_d")  # c.d and c_d collide (the same metric names), as in Kafka
INVALID_NAMES = ("", ".", "..", "sp ace", "slash/x", "x" * 250, "ünï")
_instances = itertools.count()


class Partition:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.log_start = 0

    @property
    def end(self) -> int:
        return len(self.records)


class ProtocolMachine(RuleBasedStateMachine):
    broker: BrokerProcess  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"m{next(_instances)}-"
        self.client = self.broker.client()
        self.topics: dict[str, tuple[list[Partition], bool]] = {}  # name -> (partitions, compacted)
        self.clock = int(time.time() * 1000) - 3_600_000  # record timestamps, strictly increasing

    def teardown(self) -> None:
        try:
            if self.topics:
                self.call(m.DeleteTopicsRequest(id=self.client.next_id(), topics=tuple(self.topics)))
        finally:
            self.client.close()

    # -- helpers -----------------------------------------------------------------------------

    def call(self, request: m.Request) -> dict:
        """One round trip; the response is checked against its API's schema by decode_response."""
        doc = self.client.call(request)
        assert doc["id"] == request.id
        return doc

    def name(self, short: str) -> str:
        return self.prefix + short

    def partition_of(self, topic: str, partition: int) -> Partition | None:
        entry = self.topics.get(topic)
        if entry is None or not 0 <= partition < len(entry[0]):
            return None
        return entry[0][partition]

    def pick(self, data) -> tuple[str, int]:
        """A (topic, partition) to address: mostly an existing one, sometimes an unknown topic, a
        partition past the last or a negative partition (0 shrinks to the common case)."""
        existing = [(name, p) for name, (parts, _) in sorted(self.topics.items()) for p in range(len(parts))]
        choice = data.draw(st.integers(0, 9), label="pick")
        if existing and choice < 8:
            return data.draw(st.sampled_from(existing), label="partition")
        if choice == 9 and self.topics:
            name = data.draw(st.sampled_from(sorted(self.topics)), label="topic")
            return name, data.draw(st.sampled_from([len(self.topics[name][0]), -1]), label="bad partition")
        return self.name(data.draw(st.sampled_from(NAMES), label="topic")), data.draw(st.integers(0, 2))

    def expect(self, result: dict, code: ErrorCode) -> None:
        assert result["error_code"] == code, result
        assert (result["error_message"] is None) == (code == E.NONE), result

    # -- topics ------------------------------------------------------------------------------

    @initialize()
    def first_topic(self) -> None:
        self.create(("a", 2, False))

    @rule(spec=st.tuples(st.sampled_from(NAMES), st.integers(1, 3), st.booleans()))
    def create(self, spec) -> None:
        short, count, compacted = spec
        name = self.name(short)
        configs = {"segment.bytes": "4096"} | ({"cleanup.policy": "compact"} if compacted else {})
        doc = self.call(m.CreateTopicsRequest(id=self.client.next_id(), topics=(
            m.NewTopic(name=name, num_partitions=count, replication_factor=1, configs=configs),)))
        (result,) = doc["topics"]
        if name in self.topics:
            self.expect(result, E.TOPIC_ALREADY_EXISTS)
        elif any(t != name and t.replace(".", "_") == name.replace(".", "_") for t in self.topics):
            self.expect(result, E.INVALID_TOPIC_EXCEPTION)
        else:
            self.expect(result, E.NONE)
            assert result["num_partitions"] == count
            self.topics[name] = ([Partition() for _ in range(count)], compacted)

    @rule(bad=st.sampled_from(["name", "partitions", "replication", "config", "config-value"]))
    def create_invalid(self, bad) -> None:
        new = dict(name=self.name("fresh"), num_partitions=1, replication_factor=1, configs={})
        code = {"name": E.INVALID_TOPIC_EXCEPTION, "partitions": E.INVALID_PARTITIONS,
                "replication": E.INVALID_REPLICATION_FACTOR, "config": E.INVALID_CONFIG,
                "config-value": E.INVALID_CONFIG}[bad]
        if bad == "name":
            new["name"] = INVALID_NAMES[self.client.next_id() % len(INVALID_NAMES)]
        elif bad == "partitions":
            new["num_partitions"] = 0
        elif bad == "replication":
            new["replication_factor"] = 3
        elif bad == "config":
            new["configs"] = {"no.such.config": "1"}
        else:
            new["configs"] = {"segment.bytes": "ten"}
        doc = self.call(m.CreateTopicsRequest(id=self.client.next_id(), topics=(m.NewTopic(**new),)))
        self.expect(doc["topics"][0], code)

    @rule(short=st.sampled_from(NAMES))
    def delete(self, short) -> None:
        name = self.name(short)
        doc = self.call(m.DeleteTopicsRequest(id=self.client.next_id(), topics=(name,)))
        self.expect(doc["topics"][0], E.NONE if name in self.topics else E.UNKNOWN_TOPIC_OR_PARTITION)
        self.topics.pop(name, None)

    # -- produce -----------------------------------------------------------------------------

    def _records(self, data, count: int, keyed: bool) -> list[Record]:
        out = []
        for i in range(count):
            self.clock += data.draw(st.integers(1, 1000), label="timestamp step")
            key = data.draw(st.sampled_from([b"k1", b"k2", b"k3", b""]), label="key") if keyed else None
            value = data.draw(st.one_of(st.none(), st.binary(max_size=300)), label="value") if keyed else \
                data.draw(st.binary(max_size=300), label="value")
            headers = data.draw(st.sampled_from([(), (("h", b"v"),), (("n", None), ("x", b""))]), label="headers")
            out.append(Record(i, self.clock, key, value, headers))
        return out

    def _produce(self, topic: str, partition: int, records: bytes, acks: int) -> dict:
        doc = self.call(m.ProduceRequest(id=self.client.next_id(), acks=acks, timeout_ms=30_000, topics=(
            m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=records),)),)))
        (topic_result,) = doc["topics"]
        (result,) = topic_result["partitions"]
        assert (topic_result["name"], result["partition"]) == (topic, partition)
        return result

    @rule(data=st.data(), codec=st.sampled_from(list(CompressionType)), count=st.integers(1, 12),
          acks=st.sampled_from([-1, 1]))
    def produce(self, data, codec, count, acks) -> None:
        topic, partition = self.pick(data)
        target = self.partition_of(topic, partition)
        compacted = self.topics.get(topic, (None, False))[1]
        records = self._records(data, count, keyed=compacted or data.draw(st.booleans(), label="keyed"))
        result = self._produce(topic, partition, encode_batch(records, compression=codec), acks)
        if target is None:
            self.expect(result, E.UNKNOWN_TOPIC_OR_PARTITION)
            return
        self.expect(result, E.NONE)
        assert result["base_offset"] == target.end
        assert result["log_start_offset"] == target.log_start
        target.records += [Record(target.end + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]

    @rule(data=st.data(), bad=st.sampled_from([
        "crc", "truncated", "two-batches", "legacy-magic", "base-offset", "append-time", "future",
        "empty", "no-records", "keyless-on-compacted", "garbage"]))
    def produce_malformed(self, data, bad) -> None:
        topic, partition = self.pick(data)
        target = self.partition_of(topic, partition)
        entry = self.topics.get(topic)
        if bad == "keyless-on-compacted" and (entry is None or not entry[1]):
            return
        records = self._records(data, 3, keyed=bad != "keyless-on-compacted")
        batch = bytearray(encode_batch(records))
        code = E.CORRUPT_MESSAGE
        if bad == "crc":
            batch[-1] ^= 0xFF
        elif bad == "truncated":
            del batch[-5:]
        elif bad == "two-batches":
            batch = bytearray(bytes(batch) * 2)
            code = E.INVALID_RECORD
        elif bad == "legacy-magic":
            batch[16] = 1
            code = E.UNSUPPORTED_FOR_MESSAGE_FORMAT
        elif bad == "base-offset":
            batch = bytearray(encode_batch(records, base_offset=0))
            struct.pack_into(">q", batch, 0, 5)  # outside the CRC
            code = E.INVALID_RECORD
        elif bad == "append-time":
            batch = bytearray(encode_batch(records, timestamp_type=1))
            code = E.INVALID_TIMESTAMP
        elif bad == "future":
            future = [Record(i, int(time.time() * 1000) + 7_200_000, r.key, r.value) for i, r in enumerate(records)]
            batch = bytearray(encode_batch(future))
            code = E.INVALID_TIMESTAMP
        elif bad == "empty":
            batch = bytearray()
            code = E.INVALID_RECORD
        elif bad == "no-records":
            batch = bytearray(encode_batch([]))
            code = E.INVALID_RECORD
        elif bad == "keyless-on-compacted":
            code = E.INVALID_RECORD
        else:
            batch = bytearray(data.draw(st.binary(min_size=1, max_size=200), label="garbage"))
            if len(batch) >= 17 and batch[16] in (0, 1):
                batch[16] = 3  # not a legacy magic: that one has its own code
        result = self._produce(topic, partition, bytes(batch), -1)
        self.expect(result, code if target is not None else E.UNKNOWN_TOPIC_OR_PARTITION)

    # -- malformed requests --------------------------------------------------------------------

    @rule(bad=st.sampled_from(["not-msgpack", "array", "empty", "unknown-api", "version", "bad-acks",
                               "negative-wait", "duplicate-delete", "deep", "trailing", "id-negative"]))
    def malformed_request(self, bad) -> None:
        request_id = self.client.next_id()
        existing = next(iter(self.topics), self.name("a"))

        def pack(doc) -> bytes:
            return msgpack.packb(doc, use_bin_type=True)

        frames = {
            "not-msgpack": (b"\xc1", E.INVALID_REQUEST, None, None),
            "array": (pack([1, 2]), E.INVALID_REQUEST, None, None),
            "empty": (b"", E.INVALID_REQUEST, None, None),
            "unknown-api": (pack({"api": "nope", "v": 1, "id": request_id}), E.INVALID_REQUEST, request_id, None),
            "version": (pack({"api": "metadata", "v": 9, "id": request_id}), E.UNSUPPORTED_VERSION, request_id,
                        "metadata"),
            "bad-acks": (pack({"api": "produce", "v": 1, "id": request_id, "acks": 2, "timeout_ms": 0,
                               "topics": []}), E.INVALID_REQUEST, request_id, "produce"),
            "negative-wait": (pack({"api": "fetch", "v": 1, "id": request_id, "max_wait_ms": -1, "min_bytes": 0,
                                    "max_bytes": 0, "topics": []}), E.INVALID_REQUEST, request_id, "fetch"),
            # Refused as a whole: the topic must survive (checked by the rules that follow).
            "duplicate-delete": (pack({"api": "delete_topics", "v": 1, "id": request_id,
                                       "topics": [existing, existing]}), E.INVALID_REQUEST, request_id,
                                 "delete_topics"),
            "deep": (b"\x91" * 5000 + b"\xc0", E.INVALID_REQUEST, None, None),
            "trailing": (pack({"api": "metadata", "v": 1, "id": request_id}) + b"\xc0", E.INVALID_REQUEST, None,
                         None),
            "id-negative": (pack({"api": "metadata", "v": 1, "id": -3}), E.INVALID_REQUEST, None, "metadata"),
        }
        payload, code, echoed, api = frames[bad]
        self.client.send_frame(payload)
        raw = self.client.recv_frame()
        doc = m.decode_response(raw, api) if api else msgpack.unpackb(raw, raw=False)
        assert doc["error_code"] == code and doc["error_message"], doc
        assert doc["id"] == echoed, doc

    @rule(api=st.sampled_from(["produce", "fetch", "list_offsets", "delete_records", "describe_configs"]),
          name=st.sampled_from(INVALID_NAMES))
    def invalid_topic_name(self, api, name) -> None:
        request_id = self.client.next_id()
        request = {
            "produce": lambda: m.ProduceRequest(id=request_id, acks=1, timeout_ms=1000, topics=(m.ProduceTopic(
                name=name, partitions=(m.ProducePartition(partition=0, records=encode_batch(
                    [Record(0, self.clock, b"k", b"v")])),)),)),
            "fetch": lambda: m.FetchRequest(id=request_id, max_wait_ms=0, min_bytes=0, max_bytes=1000, topics=(
                m.FetchTopic(name=name, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1000),)),)),
            "list_offsets": lambda: m.ListOffsetsRequest(id=request_id, topics=(m.ListOffsetsTopic(
                name=name, partitions=(m.ListOffsetsPartition(partition=0, timestamp=-1),)),)),
            "delete_records": lambda: m.DeleteRecordsRequest(id=request_id, topics=(m.DeleteRecordsTopic(
                name=name, partitions=(m.DeleteRecordsPartition(partition=0, offset=-1),)),)),
            "describe_configs": lambda: m.DescribeConfigsRequest(id=request_id, topics=(name,)),
        }[api]()
        doc = self.call(request)
        (topic,) = doc["topics"]
        results = topic.get("partitions", [topic])
        for result in results:
            self.expect(result, E.INVALID_TOPIC_EXCEPTION)

    # -- reading -------------------------------------------------------------------------------

    @rule(data=st.data(), where=st.sampled_from(["start", "middle", "end", "past-end", "below-start", "negative"]))
    def fetch(self, data, where) -> None:
        topic, partition = self.pick(data)
        target = self.partition_of(topic, partition)
        offset = {"start": 0, "end": 0, "past-end": 1, "below-start": -1, "negative": -(2**40), "middle": 0}[where]
        if target is not None:
            if where == "middle":
                offset = data.draw(st.integers(target.log_start, max(target.log_start, target.end)), label="offset")
            else:
                offset += {"start": target.log_start, "end": target.end, "past-end": target.end,
                           "below-start": target.log_start, "negative": 0}[where]
        doc = self.call(m.FetchRequest(id=self.client.next_id(), max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                       topics=(m.FetchTopic(name=topic, partitions=(m.FetchPartition(
                                           partition=partition, fetch_offset=offset,
                                           partition_max_bytes=1 << 20),)),)))
        (result,) = doc["topics"][0]["partitions"]
        if target is None:
            self.expect(result, E.UNKNOWN_TOPIC_OR_PARTITION)
            return
        if not target.log_start <= offset <= target.end:
            self.expect(result, E.OFFSET_OUT_OF_RANGE)
            return
        self.expect(result, E.NONE)
        assert (result["log_start_offset"], result["high_watermark"]) == (target.log_start, target.end)
        fetched = [r for batch in iter_batches(result["records"]) for r in batch.records if r.offset >= offset]
        if offset < target.end:
            assert fetched, f"fetch at {offset} of {target.end} returned nothing"
        assert fetched == target.records[offset: offset + len(fetched)]

    @rule(data=st.data(), query=st.sampled_from(["latest", "earliest", "max", "time", "after-all"]))
    def list_offsets(self, data, query) -> None:
        topic, partition = self.pick(data)
        target = self.partition_of(topic, partition)
        timestamp = {"latest": -1, "earliest": -2, "max": -3, "after-all": self.clock + 1}.get(query, 0)
        if query == "time" and target is not None and target.records:
            timestamp = data.draw(st.sampled_from([r.timestamp for r in target.records]), label="timestamp") - \
                data.draw(st.sampled_from([0, 1]), label="minus")
        doc = self.call(m.ListOffsetsRequest(id=self.client.next_id(), topics=(m.ListOffsetsTopic(
            name=topic, partitions=(m.ListOffsetsPartition(partition=partition, timestamp=timestamp),)),)))
        (result,) = doc["topics"][0]["partitions"]
        if target is None:
            self.expect(result, E.UNKNOWN_TOPIC_OR_PARTITION)
            return
        self.expect(result, E.NONE)
        live = target.records[target.log_start:]
        if query == "latest":
            expected = target.end
        elif query == "earliest":
            expected = target.log_start
        elif query == "max":
            expected = live[-1].offset if live else -1
        else:
            expected = next((r.offset for r in live if r.timestamp >= timestamp), -1)
        assert result["offset"] == expected, (query, timestamp, result)
        if query in ("max", "time", "after-all") and expected >= 0:
            assert result["timestamp"] == target.records[expected].timestamp

    @rule(data=st.data(), where=st.sampled_from(["within", "high-watermark", "past-end", "below-minus-one"]))
    def delete_records(self, data, where) -> None:
        topic, partition = self.pick(data)
        target = self.partition_of(topic, partition)
        offset = {"high-watermark": -1, "past-end": 1, "below-minus-one": -2, "within": 0}[where]
        if target is not None and where == "within":
            offset = data.draw(st.integers(0, target.end), label="offset")
        elif target is not None and where == "past-end":
            offset = target.end + 1
        doc = self.call(m.DeleteRecordsRequest(id=self.client.next_id(), topics=(m.DeleteRecordsTopic(
            name=topic, partitions=(m.DeleteRecordsPartition(partition=partition, offset=offset),)),)))
        (result,) = doc["topics"][0]["partitions"]
        if target is None:
            self.expect(result, E.UNKNOWN_TOPIC_OR_PARTITION)
            return
        if where in ("past-end", "below-minus-one"):
            self.expect(result, E.OFFSET_OUT_OF_RANGE)
            return
        self.expect(result, E.NONE)
        target.log_start = max(target.log_start, target.end if offset == -1 else offset)
        assert result["low_watermark"] == target.log_start

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def metadata_matches_the_model(self) -> None:
        """Also proves the connection is still usable after whatever the last rule sent."""
        doc = self.call(m.MetadataRequest(id=self.client.next_id(), topics=None))
        ours = {t["name"]: t for t in doc["topics"] if t["name"].startswith(self.prefix)}
        assert set(ours) == set(self.topics)
        for name, (partitions, _) in self.topics.items():
            got = [(p["partition"], p["log_start_offset"], p["high_watermark"]) for p in ours[name]["partitions"]]
            assert got == [(i, p.log_start, p.end) for i, p in enumerate(partitions)], name


def test_protocol_state_machine(broker):
    ProtocolMachine.broker = broker
    run_state_machine_as_test(ProtocolMachine, settings=settings(
        max_examples=40, stateful_step_count=40, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
