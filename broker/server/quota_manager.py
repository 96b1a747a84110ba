"""Enforcing client quotas, as Kafka's ClientQuotaManager and ClientRequestQuotaManager do: each
client's bytes (producer_byte_rate, consumer_byte_rate) and the time its requests take to handle
(request_percentage) are metered against its quota and a client over it is throttled: the response says for how long
(``throttle_ms``, Kafka's throttle_time_ms) and the connection reads nothing more from the client
until then (KIP-219: the broker mutes the channel; a well-behaved client waits too). The
allowance for bursts is one ``quota.window.size.seconds`` of the quota.

Sans I/O: the connections feed in byte counts (or handling seconds) with the time, and get a
throttle time back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from triolog.broker.security.quotas import CLIENT_ID, USER, QuotaEntity, QuotaStore

__all__ = ["ClientQuotaManager", "ClientQuotas", "THROTTLE_EPSILON_S", "TokenBucket", "throttle_ms"]

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
        self.balance = self._balance_at(now) - amount
        self.at = now
        return self._wait_s(self.balance)

    def debt_s(self, now: float) -> float:
        """The seconds until the balance is back to zero (0 if it is not below), spending nothing."""
        return self._wait_s(self._balance_at(now))

    def _balance_at(self, now: float) -> float:
        return min(self.burst, self.balance + (now - self.at) * self.rate)

    def _wait_s(self, balance: float) -> float:
        return -balance / self.rate if balance < 0 else 0.0


class ClientQuotaManager:
    """One kind of client quota (``key``: producer_byte_rate, consumer_byte_rate, or
    request_percentage: then what is recorded is percent-seconds, handling seconds x 100, so that
    its rate is a percent of one thread)."""

    def __init__(
        self,
        store: QuotaStore,
        key: str,
        *,
        window_s: float = 1.0,
        max_throttle_s: float = 11.0,
        clock: Callable[[], float] = time.monotonic,
        on_throttle=None,
    ):
        self.store = store
        self.key = key
        self.window_s = window_s
        #: The longest single throttle, and the most one fetch may carry at the quota: Kafka's
        #: quota window span (quota.window.num x quota.window.size.seconds).
        self.max_throttle_s = max_throttle_s
        self.clock = clock
        #: Called with (entity, bytes, throttle seconds) per recording under a quota (metrics).
        self.on_throttle = on_throttle
        #: (the entity whose quota applies, user, client id) -> its TokenBucket.
        self._sensors: dict[tuple[QuotaEntity, str, str], TokenBucket] = {}
        self._last_sweep = 0.0

    def _bucket(
        self, user: str, client_id: str, found: tuple[float, QuotaEntity], now: float
    ) -> tuple[TokenBucket, QuotaEntity]:
        """The client's allowance under ``found``, the quota that applies and its entity: kept per
        client under that entity, as Kafka keeps a sensor per client (its own user and client id)
        under a default entity."""
        quota, entity = found
        key = (entity, user if USER in entity.types else "", client_id if CLIENT_ID in entity.types else "")
        bucket = self._sensors.get(key)
        if bucket is None:
            bucket = self._sensors[key] = TokenBucket(quota, quota * self.window_s, now)
            self._sweep(now)
        elif bucket.rate != quota:  # the quota was altered
            bucket.rate, bucket.burst = quota, quota * self.window_s
        return bucket, entity

    def record(self, user: str, client_id: str, nbytes: float) -> float:
        """Count ``nbytes`` for the client; the seconds it is to be throttled (0 if within quota
        or without one)."""
        found = self.store.quota_for(self.key, user, client_id)
        if found is None:  # before reading the clock: every request asks for request_percentage
            return 0.0
        now = self.clock()
        bucket, entity = self._bucket(user, client_id, found, now)
        throttle = min(bucket.spend(nbytes, now), self.max_throttle_s)
        if self.on_throttle is not None:
            self.on_throttle(entity, nbytes, throttle)
        return throttle

    def throttle_time(self, user: str, client_id: str) -> float:
        """The seconds the client is still in debt (0 if not, or without a quota), spending
        nothing: a fetch is answered without records while this is above THROTTLE_EPSILON_S
        (the throttle it then gives is reported to ``on_throttle``, with nothing recorded)."""
        found = self.store.quota_for(self.key, user, client_id)
        if found is None:
            return 0.0
        now = self.clock()
        bucket, entity = self._bucket(user, client_id, found, now)
        throttle = min(bucket.debt_s(now), self.max_throttle_s)
        if throttle > THROTTLE_EPSILON_S and self.on_throttle is not None:
            self.on_throttle(entity, 0, throttle)
        return throttle

    @property
    def active(self) -> bool:
        """Whether any entity sets this quota."""
        return self.store.has_key(self.key)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most the client could ever get through in one response (Kafka's
        getMaxValueInQuotaWindow: quota x the window span); None without a quota."""
        found = self.store.quota_for(self.key, user, client_id)
        return None if found is None else found[0] * self.max_throttle_s

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


#: A debt shorter than this is no debt: a client muted until its debt was repaid comes back a few
#: microseconds early or late by rounding, and must not get an empty answer for that.
THROTTLE_EPSILON_S = 0.001


class ClientQuotas:
    """The broker's client quota managers (produce, fetch, request), over one store."""

    def __init__(
        self,
        store: QuotaStore,
        *,
        window_s: float = 1.0,
        windows: int = 11,
        clock: Callable[[], float] = time.monotonic,
        on_throttle=None,
    ):
        self.store = store

        def manager(key: str) -> ClientQuotaManager:
            callback = None if on_throttle is None else (lambda entity, n, s, k=key: on_throttle(k, entity, n, s))
            return ClientQuotaManager(
                store, key, window_s=window_s, max_throttle_s=window_s * windows, clock=clock, on_throttle=callback
            )

        self.produce = manager("producer_byte_rate")
        self.fetch = manager("consumer_byte_rate")
        self.request = manager("request_percentage")
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
