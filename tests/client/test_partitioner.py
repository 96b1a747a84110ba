"""Kafka's default partitioner: murmur2 for keys (checked against kafka-python and Java's own
test vectors), sticky for keyless records."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from triolog.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive
from triolog import core

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key", list(JAVA_VECTORS))
def test_partitioner_murmur2_matches_java_utils_test_vectors(key):
    assert murmur2(key) == JAVA_VECTORS[key]


@given(key=st.binary(max_size=64), partitions=st.integers(1, 1000))
def test_partitioner_key_choice_matches_kafka_python(key, partitions):
    # kafka-python returns the unsigned hash; toPositive is the same either way.
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def test_partitioner_to_positive_clears_only_the_sign_bit():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_partitioner_sticky_switches_to_a_different_partition_each_time():
    sticky = StickyPartitioner(random.Random(7))
    current = sticky.current("t", 4)
    assert sticky.current("t", 4) == current  # sticky until told to move
    for _ in range(50):
        nxt = sticky.next("t", 4)
        assert nxt != current and 0 <= nxt < 4
        current = nxt
    assert {sticky.next("t", 4) for _ in range(200)} == {0, 1, 2, 3}
    assert sticky.next("single", 1) == 0


IMPLEMENTATIONS = [pytest.param(False, id="pure")]
if core.compiled_available("client.partitioner"):
    IMPLEMENTATIONS.append(pytest.param(True, id="compiled"))


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 1000))
def test_partitioner_both_implementations_hash_like_kafka_python(compiled, key, partitions):
    module = core.implementation("client.partitioner", compiled)
    signed = module.murmur2(key)
    assert -(2**31) <= signed < 2**31 and signed & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert module.partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@pytest.mark.parametrize("key", list(JAVA_VECTORS))
def test_partitioner_both_implementations_match_java_test_vectors(compiled, key):
    assert core.implementation("client.partitioner", compiled).murmur2(key) == JAVA_VECTORS[key]
