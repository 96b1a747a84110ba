"""The per-record walk of a v2 batch: every record checked, nothing built.

Kafka's leader reads every record of a producer's batch before storing it (LogValidator, with
DefaultRecordBatch's iterators and DefaultRecord.readFrom), so a batch whose CRC is right but
whose records are not never reaches a consumer. ``walk_records`` is that read, for the broker's
validator: it follows the length prefixes and varints of exactly ``count`` records and raises
InvalidRecordError (Kafka's INVALID_RECORD) for anything DefaultRecord would refuse:

* a record count that disagrees with the records present ("Incorrect declared batch size":
  premature EOF, or bytes still remaining after the last record);
* a record length prefix that is negative, runs past the data, or disagrees with the fields it
  frames ("Invalid record size");
* a varint longer than 5 bytes or a varlong longer than 10 ("Found invalid record structure");
* a key, value or header running out of bounds, a negative header count, more headers than
  bytes left, a header with a negative (null) key length;

and, as the walk goes, the record-level rules LogValidator applies: a timestamp outside
[``min_timestamp``, ``max_timestamp``] raises InvalidTimestampError (INVALID_TIMESTAMP; Kafka
exempts NO_TIMESTAMP, -1; the error's ``timestamp`` attribute is the offending one), and with
``keys_required`` (compacted topics) a null key raises InvalidRecordError. It returns what the
broker computes instead of trusting the header: the largest record timestamp, the index of the
first record carrying it, and whether the offset deltas are exactly 0..count-1.

It is one pure function over a buffer, allocation-free per record. Its code lives in
protocol/record_codec.py, the compiled core's one record codec (triolog/core.py), beside the
encoder and decoders, so the varint code exists once; this module keeps the validator's import
path and gives the implementation this process runs (compiled where it was built).
"""

from __future__ import annotations

from triolog import core

__all__ = ["renumber_records", "walk_records"]

_codec = core.load("protocol.record_codec")
walk_records = _codec.walk_records
renumber_records = _codec.renumber_records
