"""``triolog health``: is the broker answering? One ``api_versions`` round trip, exit 0 or 1.

Made for Docker's HEALTHCHECK and for scripts: a TCP connect alone would call a broker healthy
whose event loop is stuck, so this asks the broker itself to answer a request. It prints one line
(stdout when healthy, stderr when not) and never retries: the caller's schedule does that.
"""

from __future__ import annotations

import argparse
import time

from .common import EXIT_ERROR, EXIT_OK, add_bootstrap, error

DESCRIPTION = (
    "Check that the broker answers an api_versions request within --timeout; "
    "exit 0 when it does, 1 otherwise (for Docker's HEALTHCHECK and scripts)."
)


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a timeout > 0 s, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=5.0,
        metavar="S",
        help="seconds to wait for the connection, and again for the answer (default 5)",
    )


def run(args: argparse.Namespace) -> int:
    from triolog.client.admin_core import AdminCore
    from triolog.client.connection import SyncConnection
    from triolog.client.errors import TriologClientError
    from triolog.client.ops import run_sync

    from .common import client_security

    start = time.monotonic()
    try:
        security = client_security(args).get("security")
    except TriologClientError as exc:
        error(str(exc))
        return EXIT_ERROR
    conn = SyncConnection(
        args.bootstrap_server, client_id="triolog-health", connect_timeout_s=args.timeout, security=security
    )
    try:
        response = run_sync(AdminCore(request_timeout_ms=int(args.timeout * 1000)).api_versions_op(), conn)
    except TriologClientError as exc:
        error(f"broker at {args.bootstrap_server} is not healthy: {exc}")
        return EXIT_ERROR
    finally:
        conn.close()
    elapsed_ms = (time.monotonic() - start) * 1000
    version = response.get("broker_version") or "unknown version"
    print(
        f"OK: broker at {args.bootstrap_server} ({version}) answered api_versions in {elapsed_ms:.1f} ms "
        f"({len(response.get('apis') or ())} APIs)"
    )
    return EXIT_OK
