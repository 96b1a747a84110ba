"""acks=all (-1) is answered only once the records are fsynced (group commit), and within
timeout_ms or with REQUEST_TIMED_OUT. The real broker in-process over a real socket: at the
moment the response arrives the log's recovery point (what is known to be on disk) must already
cover the records. The default flush policy never flushes by itself, so nothing else moves it;
a kill -9 cannot tell the difference (the page cache survives the process), this can."""

from __future__ import annotations

import trio

from triolog.protocol.errors import ErrorCode

from .inprocess import Client, running_broker, values_of


async def test_acks_all_is_answered_only_after_the_fsync_covers_the_records(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        assert (await client.create("durable"))["error_code"] == 0
        log = server.log_manager.get_log("durable", 0)
        rounds = server.committer.flushes

        acks1 = await client.produce("durable", [b"a", b"b"], acks=1)
        assert acks1["error_code"] == 0
        assert log.recovery_point == 0  # acks=1: appended, not fsynced (the check below can fail)

        result = await client.produce("durable", [b"c", b"d", b"e"], acks=-1)
        assert result["error_code"] == 0 and result["base_offset"] == 2
        assert log.recovery_point >= 5, "acks=all answered before its records were fsynced"
        assert server.committer.flushes > rounds
        await client.aclose()


async def test_acks_all_not_fsynced_within_timeout_ms_is_request_timed_out(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("slow-disk")
        log = server.log_manager.get_log("slow-disk", 0)
        async with server.committer.limiter:  # the group commit's flush cannot start: a stalled disk
            with trio.fail_after(10):
                result = await client.produce("slow-disk", [b"late"], acks=-1, timeout_ms=200)
        assert result["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert "not fsynced within timeout_ms=200" in result["error_message"]
        assert log.recovery_point == 0
        # Kafka's meaning: the records are in the log, only their durability was not confirmed.
        assert values_of((await client.fetch("slow-disk"))["records"]) == [b"late"]
        with trio.fail_after(10):
            again = await client.produce("slow-disk", [b"then"], acks=-1)
        assert again["error_code"] == 0 and log.recovery_point >= 2
        await client.aclose()
