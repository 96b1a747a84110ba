"""The hot paths pack their responses straight from their results; the bytes must be exactly
those of the message objects' encoding (which the conformance tests check against the spec)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from triolog.broker.server.handlers import BROKER_VERSION, ApiVersionsAnswer, produce_payload
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
appended = st.builds(lambda first, at, start: (AppendInfo(first, at, start), object()), int64, int64, int64)
failed = st.builds(lambda code, message: ((code, message), None), error_codes, st.text(min_size=1, max_size=20))
rows = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.one_of(appended, failed)), max_size=5)
results = st.lists(st.tuples(st.text(min_size=1, max_size=10), rows), max_size=4)


@given(ids, results)
def test_produce_payload_is_the_encoded_response(request_id, topic_rows):
    done = [(name, [(p, info, log) for p, (info, log) in parts]) for name, parts in topic_rows]
    reference = m.ProduceResponse(id=request_id, topics=tuple(
        m.ProduceTopicResult(name=name, partitions=tuple(
            m.ProducePartitionResult(partition=p, error_code=info[0], error_message=info[1]) if log is None
            else m.ProducePartitionResult(partition=p, base_offset=info.first_offset,
                                          log_append_time=info.log_append_time_ms,
                                          log_start_offset=info.log_start_offset)
            for p, info, log in parts))
        for name, parts in done))
    encoded = produce_payload(request_id, done)
    assert encoded.payload == m.encode_response(reference, check_schema=False)
    assert encoded.error_code == 0
    from triolog.broker.server.connection import _entry_errors

    assert encoded.entry_errors == _entry_errors(reference)
