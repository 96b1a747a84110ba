"""Group commit for acks=all: one fsync covers every produce request waiting at that moment.

Waiters register (log, offset) and sleep; a single flusher task takes everything pending,
fsyncs each log once in a worker thread, and wakes all whose offset is now below the recovery
point. Requests that arrive during an fsync ride the next one.

The flusher runs one round at a time, so it needs one thread; it has its own limiter (by
default), so a queue of appends and reads on the storage threads never delays a group commit.
"""

from __future__ import annotations

import trio

from triolog.broker.storage.log import Log


class GroupCommitter:
    def __init__(self, limiter: trio.CapacityLimiter | None = None, run_sync=trio.to_thread.run_sync):
        self._pending: dict[Log, int] = {}
        self._waiters: list[tuple[Log, int, trio.Event]] = []
        self._wakeup = trio.Event()
        #: The thread slot the flushes run in.
        self.limiter = limiter if limiter is not None else trio.CapacityLimiter(1)
        #: How a flush goes to its thread (the broker's WorkerThreads.run_sync: counted).
        self._run_sync = run_sync
        #: Rounds run: each fsyncs every log with waiters once.
        self.flushes = 0
        self._failure: dict[Log, BaseException] = {}

    async def wait_flushed(self, log: Log, offset: int) -> None:
        """Return once everything below ``offset`` in ``log`` is fsynced; raises the flush's error."""
        if log.recovery_point >= offset:
            return
        event = trio.Event()
        self._pending[log] = max(self._pending.get(log, 0), offset)
        self._waiters.append((log, offset, event))
        self._wakeup.set()
        await event.wait()
        failure = self._failure.get(log)
        if failure is not None and log.recovery_point < offset:
            raise failure

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            pending, self._pending = self._pending, {}
            waiters, self._waiters = self._waiters, []
            for log, offset in pending.items():
                try:
                    await self._run_sync(log.flush, offset, limiter=self.limiter)
                    self._failure.pop(log, None)
                except Exception as exc:  # the log went offline; its waiters get the error
                    self._failure[log] = exc
            self.flushes += 1
            for log, offset, event in waiters:
                if log.recovery_point >= offset or log in self._failure:
                    event.set()
                else:  # flushed only up to an older target: wait for the next round
                    self._pending[log] = max(self._pending.get(log, 0), offset)
                    self._waiters.append((log, offset, event))
                    self._wakeup.set()
