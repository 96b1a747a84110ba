"""Enforcing client quotas, as Kafka's ClientQuotaManager does: each client's bytes are metered
against its quota and a client over it is throttled: the response says for how long
(``throttle_ms``, Kafka's throttle_time_ms) and the connection reads nothing more from the client
until then (KIP-219: the broker mutes the channel; a well-behaved client waits too). The
allowance for bursts is one ``quota.window.size.seconds`` of the quota.

Sans I/O: the connections feed in byte counts with the time, and get a throttle time back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from triolog.broker.security.quotas import CLIENT_ID, USER, QuotaEntity, QuotaStore

__all__ = ["ClientQuotaManager", "ClientQuotas", "TokenBucket", "throttle_ms"]

#: A client's sensor not used for this long is dropped (Kafka's inactive sensor expiry, 1 h),
#: so client-chosen client ids cannot grow memory without bound.
SENSOR_IDLE_S = 3600.0


class TokenBucket:
    """A client's allowance: it earns ``rate`` units a second up to ``burst`` and spends what it
    uses; spending past zero is a debt, repaid by waiting debt / rate. Over any span T a client
    that waits as told gets at most rate * T + burst through (burst: what it saved while idle,
    nothing at first): a steady rate exactly at its quota.
    (Kafka measures a windowed rate instead; measured here, that let a throttled producer run
    17% over its quota, because each window leaving the measure forgives what was in it.)"""

    __slots__ = ("rate", "burst", "balance", "at")

    def __init__(self, rate: float, burst: float, now: float):
        self.rate, self.burst = rate, burst
        self.balance = 0.0  # a new client has saved nothing yet: over any 10 s, at most its quota
        self.at = now

    def spend(self, amount: float, now: float) -> float:
        """Spend ``amount``; the seconds to wait before the balance is back to zero (0 if none)."""
        self.balance = min(self.burst, self.balance + (now - self.at) * self.rate) - amount
        self.at = now
        return -self.balance / self.rate if self.balance < 0 else 0.0


class ClientQuotaManager:
    """One kind of byte-rate quota (``key``: producer_byte_rate or consumer_byte_rate)."""

    def __init__(self, store: QuotaStore, key: str, *, window_s: float = 1.0, max_throttle_s: float = 11.0,
                 clock: Callable[[], float] = time.monotonic, on_throttle=None):
        self.store = store
        self.key = key
        self.window_s = window_s
        #: The longest single throttle (Kafka's: the quota window span, quota.window.num windows).
        self.max_throttle_s = max_throttle_s
        self.clock = clock
        #: Called with (entity, bytes, throttle seconds) per recording under a quota (metrics).
        self.on_throttle = on_throttle
        #: (the entity whose quota applies, user, client id) -> its TokenBucket.
        self._sensors: dict[tuple[QuotaEntity, str, str], TokenBucket] = {}
        self._last_sweep = 0.0

    def record(self, user: str, client_id: str, nbytes: int) -> float:
        """Count ``nbytes`` for the client; the seconds it is to be throttled (0 if within quota
        or without one). The allowance is kept per client under the entity whose quota applies,
        as Kafka keeps a sensor per client (its own user and client id) under a default entity."""
        found = self.store.quota_for(self.key, user, client_id)
        if found is None:
            return 0.0
        quota, entity = found
        now = self.clock()
        key = (entity, user if USER in entity.types else "", client_id if CLIENT_ID in entity.types else "")
        bucket = self._sensors.get(key)
        if bucket is None:
            bucket = self._sensors[key] = TokenBucket(quota, quota * self.window_s, now)
            self._sweep(now)
        elif bucket.rate != quota:  # the quota was altered
            bucket.rate, bucket.burst = quota, quota * self.window_s
        throttle = min(bucket.spend(nbytes, now), self.max_throttle_s)
        if self.on_throttle is not None:
            self.on_throttle(entity, nbytes, throttle)
        return throttle

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < SENSOR_IDLE_S / 10:
            return
        self._last_sweep = now
        for key in [k for k, bucket in self._sensors.items() if now - bucket.at > SENSOR_IDLE_S]:
            del self._sensors[key]

    @property
    def sensors(self) -> int:
        return len(self._sensors)


def throttle_ms(seconds: float) -> int:
    return int(math.ceil(seconds * 1000)) if seconds > 0 else 0


class ClientQuotas:
    """The broker's byte-rate quota managers, over one store."""

    def __init__(self, store: QuotaStore, *, window_s: float = 1.0, windows: int = 11,
                 clock: Callable[[], float] = time.monotonic, on_throttle=None):
        self.store = store

        def manager(key: str) -> ClientQuotaManager:
            callback = None if on_throttle is None else (lambda entity, n, s, k=key: on_throttle(k, entity, n, s))
            return ClientQuotaManager(store, key, window_s=window_s, max_throttle_s=window_s * windows,
                                      clock=clock, on_throttle=callback)

        self.produce = manager("producer_byte_rate")
        self.fetch = manager("consumer_byte_rate")
        self.clock = clock
        #: Per IP with a connection_creation_rate: its allowance of new connections.
        self._connections: dict[str, TokenBucket] = {}

    def connection_rate_exceeded(self, ip: str) -> bool:
        """Whether a new connection from ``ip`` would exceed its connection_creation_rate (its
        own, else the default IP's): it is then refused. An allowance of one second's worth."""
        rate = self.store.ip_quota(ip)
        if rate is None:
            return False
        now = self.clock()
        bucket = self._connections.get(ip)
        if bucket is None:
            if len(self._connections) > 100_000:  # scanned from many addresses: forget the idle
                self._connections = {k: b for k, b in self._connections.items() if now - b.at < 60}
            bucket = self._connections[ip] = TokenBucket(rate, max(rate, 1.0), now)
            bucket.balance = bucket.burst
        elif bucket.rate != rate:
            bucket.rate, bucket.burst = rate, max(rate, 1.0)
        if bucket.spend(1, now) > 0:
            bucket.balance += 1  # a refused connection uses none of the allowance
            return True
        return False
