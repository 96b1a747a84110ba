"""Typed exceptions: one class per wire error code, named after it."""

from __future__ import annotations

import pytest

from triolog import client
from triolog.client.errors import (ConcurrentTransactionsError, UnstableOffsetCommitError,
                                   CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError,
                                   FencedLeaderEpochError, LeaderNotAvailableError, NotLeaderOrFollowerError,
                                   UnknownLeaderEpochError, NotEnoughReplicasError,
                                   OffsetOutOfRangeError, RequestNotSentError, ResponseLostError, TriologClientError,
                           UnknownTopicOrPartitionError, error_class, error_for)
from triolog.protocol.errors import BROKER_CODES, ErrorCode


def _expected_name(code: ErrorCode) -> str:
    words = code.name.removesuffix("_EXCEPTION").removesuffix("_ERROR").split("_")
    return "".join(w.capitalize() for w in words) + "Error"


@pytest.mark.parametrize("code", [c for c in sorted(BROKER_CODES) if c != ErrorCode.NONE], ids=lambda c: c.name)
def test_errors_every_wire_code_has_its_own_class_named_after_it(code):
    cls = error_class(code)
    assert cls is not TriologClientError and issubclass(cls, TriologClientError)
    assert cls.__name__ == _expected_name(code)
    assert getattr(client, cls.__name__) is cls  # exported from the package


def test_errors_error_for_carries_code_message_and_location():
    exc = error_for(1, "offset 9 is past the log end 3", topic="t", partition=2)
    assert isinstance(exc, OffsetOutOfRangeError)
    assert exc.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert exc.error_message == "offset 9 is past the log end 3"
    assert (exc.topic, exc.partition) == ("t", 2)
    assert str(exc) == "OFFSET_OUT_OF_RANGE [t-2]: offset 9 is past the log end 3"


def test_errors_unknown_code_keeps_its_number_in_the_base_class():
    exc = error_for(999, "from a newer broker")
    assert type(exc) is TriologClientError and exc.code == 999


def test_errors_only_not_appended_failures_are_retriable():
    retriable = {cls for cls in map(error_class, ErrorCode) if cls.retriable}
    # Each of these is answered before anything is appended or stored, and passes by itself.
    assert retriable == {UnknownTopicOrPartitionError, CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                         NotCoordinatorError, LeaderNotAvailableError, NotLeaderOrFollowerError,
                         FencedLeaderEpochError, UnknownLeaderEpochError, NotEnoughReplicasError,
                         ConcurrentTransactionsError, UnstableOffsetCommitError}
    assert RequestNotSentError.retriable and not ResponseLostError.retriable
