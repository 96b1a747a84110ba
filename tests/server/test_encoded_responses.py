"""The hot paths pack their responses straight from their results; the bytes must be exactly
those of the message objects' encoding (which the conformance tests check against the spec), and
the message objects (what the Kafka listener translates) those the results say."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from triolog.broker.server.codec import entry_errors
from triolog.broker.server.error_mapping import ApiError
from triolog.broker.server.handlers import (
    BROKER_VERSION,
    ApiVersionsAnswer,
    PartitionAppend,
    TopicAppends,
    produce_payload,
    produce_response,
)
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

ids = st.integers(min_value=0, max_value=2**31 - 1)
int64 = st.integers(min_value=-1, max_value=2**63 - 1)


@given(ids)
def test_api_versions_answer_is_the_encoded_response(request_id):
    answer = ApiVersionsAnswer(BROKER_VERSION)
    assert answer.payload(request_id) == m.encode_response(
        m.ApiVersionsResponse(id=request_id, broker_version=BROKER_VERSION))


@dataclass
class AppendInfo:  # the fields of storage's LogAppendInfo the response reads
    first_offset: int
    log_append_time_ms: int
    log_start_offset: int


error_codes = st.sampled_from([code for code in ErrorCode if code != ErrorCode.NONE])
appended = st.builds(lambda p, first, at, start: PartitionAppend(p, AppendInfo(first, at, start)),
                     st.integers(0, 2**31 - 1), int64, int64, int64)
failed = st.builds(lambda p, code, message, start: PartitionAppend(p, error=ApiError(code, message),
                                                                   log_start_offset=start),
                   st.integers(0, 2**31 - 1), error_codes, st.text(min_size=1, max_size=20), int64)
results = st.lists(st.builds(TopicAppends, st.text(min_size=1, max_size=10),
                             st.lists(st.one_of(appended, failed), max_size=5)), max_size=4)


@given(ids, results, st.integers(0, 2**31 - 1))
def test_produce_payload_is_the_encoded_response(request_id, done, throttle):
    reference = m.ProduceResponse(id=request_id, throttle_ms=throttle, topics=tuple(
        m.ProduceTopicResult(name=topic.name, partitions=tuple(
            m.ProducePartitionResult(partition=row.partition, error_code=row.error.code,
                                     error_message=row.error.message, log_start_offset=row.log_start_offset)
            if row.info is None
            else m.ProducePartitionResult(partition=row.partition, base_offset=row.info.first_offset,
                                          log_append_time=row.info.log_append_time_ms,
                                          log_start_offset=row.info.log_start_offset)
            for row in topic.partitions))
        for topic in done))
    assert produce_response(request_id, done, throttle) == reference
    encoded = produce_payload(request_id, done, throttle)
    assert encoded.payload == m.encode_response(reference, check_schema=False)
    assert encoded.error_code == 0
    assert encoded.entry_errors == entry_errors(reference)
