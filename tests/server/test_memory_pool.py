"""queued.max.request.bytes: reservations up to the capacity, waiters served in arrival order,
a cancelled waiter leaves nothing behind."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from triolog.broker.server.memory_pool import RequestMemoryPool


async def test_reservations_up_to_the_capacity_do_not_wait():
    pool = RequestMemoryPool(100)
    await pool.acquire(60)
    await pool.acquire(40)
    assert pool.used == 100 and pool.waiting == 0
    pool.release(100)
    assert pool.used == 0


async def test_a_reservation_that_does_not_fit_waits_for_a_release():
    pool = RequestMemoryPool(100)
    await pool.acquire(80)
    got = trio.Event()

    async def second():
        await pool.acquire(50)
        got.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert not got.is_set() and pool.waiting == 1 and pool.used == 80
        pool.release(80)
        await got.wait()
    assert pool.used == 50 and pool.waiting == 0


async def test_waiters_are_served_first_come_first_served():
    """A large frame waiting first is not overtaken by small ones that would fit."""
    pool = RequestMemoryPool(100)
    await pool.acquire(90)
    order = []

    async def reserve(name, n):
        await pool.acquire(n)
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reserve, "large", 100)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(reserve, "small", 5)  # would fit now, but the large one came first
        await trio.testing.wait_all_tasks_blocked()
        assert order == [] and pool.waiting == 2
        pool.release(90)
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["large"]
        pool.release(100)
    assert order == ["large", "small"] and pool.used == 5


async def test_a_cancelled_waiter_gives_its_place_and_its_bytes_back():
    pool = RequestMemoryPool(100)
    await pool.acquire(90)
    got = []

    async def reserve(n, scope):
        with scope:
            await pool.acquire(n)
            got.append(n)

    first, middle = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reserve, 50, first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(reserve, 100, middle)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(reserve, 10, trio.CancelScope())
        await trio.testing.wait_all_tasks_blocked()
        assert pool.waiting == 3 and got == []
        middle.cancel()  # a waiter in the middle leaves; the 50 at the head still does not fit
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and pool.waiting == 2
        first.cancel()  # the head leaves: the 10 behind it fits
        await trio.testing.wait_all_tasks_blocked()
        assert got == [10] and pool.used == 100 and pool.waiting == 0
        pool.release(10)
        cancelled_early = trio.CancelScope()
        cancelled_early.cancel()
        nursery.start_soon(reserve, 5, cancelled_early)  # cancelled before it reserves anything
    assert got == [10] and pool.used == 90 and pool.waiting == 0


async def test_unbounded_pool_never_waits_and_a_frame_larger_than_the_pool_never_fits():
    unbounded = RequestMemoryPool(None)
    await unbounded.acquire(10**12)
    assert unbounded.fits(10**15)
    pool = RequestMemoryPool(10)
    assert pool.fits(10) and not pool.fits(11)
    with pytest.raises(ValueError):
        await pool.acquire(11)
    with pytest.raises(RuntimeError):
        pool.release(1)
