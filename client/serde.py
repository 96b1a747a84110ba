"""Key and value (de)serializers as kafka-python users pass them, in one calling shape.

Both forms kafka-python accepts are taken: a plain function of the data (its 2.x form) or an
object with ``serialize``/``deserialize(topic, headers, data)`` (its 3.x Serializer classes).
The producer and consumer call the result as ``f(topic, headers, data)`` either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Serializer = Callable[[Any], Any]
Deserializer = Callable[[bytes], Any]


def as_topic_function(name: str, given, method: str) -> Callable[[str, Any, Any], Any] | None:
    """``given`` as f(topic, headers, data); ``method`` is ``"serialize"`` or ``"deserialize"``."""
    if given is None:
        return None
    bound = getattr(given, method, None)
    if callable(bound):
        return bound
    if not callable(given):
        raise TypeError(f"{name} must be a function of the data or have {method}(topic, headers, data), got {given!r}")
    return lambda topic, headers, data: given(data)
