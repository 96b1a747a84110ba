"""The one place where an exception raised while serving a request becomes a wire error code.

A :class:`TriologError` names its own code (each class's ``code``: storage's, the SCRAM store's,
SASL's); the other exceptions of storage and security are in :data:`ERROR_CODES`; anything else
is a bug of ours: answered UNKNOWN_SERVER_ERROR and logged with its traceback.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import structlog

from triolog.broker.security.acl import InvalidAclError
from triolog.broker.security.quotas import InvalidQuotaError
from triolog.protocol.errors import ErrorCode, TriologError

__all__ = ["ERROR_CODES", "ApiError", "error_of"]

logger = structlog.get_logger("triolog.server")


class ApiError(NamedTuple):
    """An entry's (or a whole request's) error: the code and the message the client is told."""

    code: ErrorCode
    message: str

    def fields(self) -> dict:
        """As a response's ``error_code``/``error_message`` keyword arguments."""
        return {"error_code": self.code, "error_message": self.message}


#: Exceptions that are not TriologErrors, most specific first, and the code each is answered with.
ERROR_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (InvalidAclError, ErrorCode.INVALID_REQUEST),
    (InvalidQuotaError, ErrorCode.INVALID_REQUEST),
    # A disk error a log did not turn into a StorageError (a file it opened, a directory).
    (OSError, ErrorCode.KAFKA_STORAGE_ERROR),
)


def error_of(exc: BaseException, *, io_error: str = "I/O error", **context: Any) -> ApiError:
    """The code and message for ``exc``; ``context`` (topic, partition...) goes into the log line of
    an I/O error or an unmapped exception, ``io_error`` begins an I/O error's message."""
    if isinstance(exc, TriologError):
        return ApiError(exc.code, str(exc) or exc.code.name)
    for kind, code in ERROR_CODES:
        if isinstance(exc, kind):
            if code is ErrorCode.KAFKA_STORAGE_ERROR:
                logger.error("storage_error", error=str(exc), **context)
                return ApiError(code, f"{io_error}: {exc}")
            return ApiError(code, str(exc) or code.name)
    logger.exception("unexpected_error", **context)
    return ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"unexpected server error: {type(exc).__name__}: {exc}")
