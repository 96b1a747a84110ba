"""The APIs the Kafka listener serves, by api_key, and ApiVersions, which advertises exactly them.

The version ranges are chosen so that current clients negotiate what they need: every version
kio has from the oldest a client of the last years sends, up to the last one that names topics
by name (Fetch 13+ and Produce 13 name them by topic id, which triolog's topics do not have).
"""

from __future__ import annotations

import re
from typing import Any

from triolog.protocol.errors import ErrorCode

from . import admin_apis, controller_apis, data_apis, epoch_apis, group_apis, sasl_apis, security_apis, txn_apis
from .apis import Adapter, ApiKey, Direct, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, response_class

__all__ = ["ADAPTERS", "SERVED_VERSIONS", "API_VERSIONS_KEY", "unsupported_api_versions_body"]

API_VERSIONS_KEY = ApiKey.API_VERSIONS  # (the name the listener imports)
#: Kafka's rule for ApiVersions v3's client_software_name and client_software_version.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in sorted(SERVED_VERSIONS.items())]


def api_versions_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    code = ErrorCode.NONE
    if req.version >= 3 and not (
        _SOFTWARE.fullmatch(body.client_software_name) and _SOFTWARE.fullmatch(body.client_software_version)
    ):
        code = ErrorCode.INVALID_REQUEST
    return Direct(
        build(
            response_class(API_VERSIONS_KEY, req.version),
            {"error_code": code, "api_keys": _api_keys(), "throttle_time": 0},
        )
    )


def unsupported_api_versions_body() -> Any:
    """Kafka's answer to an ApiVersions request of a version it does not know: a v0 response
    with UNSUPPORTED_VERSION and the versions served, from which the client picks one it has."""
    return build(
        response_class(API_VERSIONS_KEY, 0), {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
    )


def _never(response, req, ctx):  # pragma: no cover - ApiVersions is always answered directly
    raise AssertionError("ApiVersions has no internal request")


ADAPTERS: dict[int, Adapter] = {
    **by_key(Adapter(API_VERSIONS_KEY, 0, 4, api_versions_to_internal, _never, "api_versions")),
    **data_apis.ADAPTERS,
    **group_apis.ADAPTERS,
    **admin_apis.ADAPTERS,
    **controller_apis.ADAPTERS,
    **epoch_apis.ADAPTERS,
    **sasl_apis.ADAPTERS,
    **security_apis.ADAPTERS,
    **txn_apis.ADAPTERS,
}

SERVED_VERSIONS: dict[int, tuple[int, int]] = {key: (a.min_version, a.max_version) for key, a in ADAPTERS.items()}
