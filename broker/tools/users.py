"""``triolog users``: SASL/SCRAM users, as Kafka's ``kafka-configs.sh --alter --entity-type users
--add-config 'SCRAM-SHA-256=[...]'`` and ``kafka-storage.sh format --add-scram``.

Offline: on a stopped broker's data, found through the same ``--config`` and ``--override``
options as ``serve``; the change takes effect when the broker starts. With ``zookeeper.connect``
in that configuration, the cluster's users in ZooKeeper instead (Kafka's ``kafka-configs.sh
--zookeeper``): every broker follows at once, which is how a cluster gets its first user. The log directory's lock is
held meanwhile, so a running broker is never edited under its feet. Credentials are stored salted
and hashed (triolog-users.json, mode 0600); the password itself is never written.

Online: ``--bootstrap-server HOST:PORT`` (and ``--command-config FILE``, Kafka's client properties,
for a TLS/SASL listener) changes a running broker's users through alter/describe_user_scram_credentials
(Kafka's ``kafka-configs.sh --bootstrap-server``): the password is salted and hashed here, only
the salted password travels. The same --add/--delete/--list options.
"""

from __future__ import annotations

import argparse
import sys

from triolog.broker.tools import ToolError, add_location_arguments, offline_store, online_admin

DESCRIPTION = (
    "Add, delete and list the SASL/SCRAM users of a broker. Online through --bootstrap-server (and "
    "--command-config for TLS/SASL), or offline on a stopped broker's log.dirs (found through --config and "
    "--override, as serve finds them; the change takes effect at the next start). With zookeeper.connect in that "
    "configuration: the cluster's users, in ZooKeeper."
)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add a user, or change its password (--user, --password)")
    action.add_argument("--delete", action="store_true", help="delete a user's credentials (--user)")
    action.add_argument("--list", action="store_true", help="list the users and their mechanisms")
    parser.add_argument("--user", metavar="NAME", help="the user name (its principal is User:NAME)")
    parser.add_argument("--password", metavar="PASSWORD", help="the password (--add)")
    parser.add_argument(
        "--mechanism",
        choices=MECHANISMS,
        action="append",
        metavar="MECHANISM",
        help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable); --add: both by default, so every "
        "mechanism a listener offers works; --delete: every mechanism of the user by default",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=4096,
        metavar="N",
        help="SCRAM iterations, 4096..16384 (default 4096, Kafka's minimum)",
    )
    add_location_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from triolog.broker.security.scram import CredentialStore, UnacceptableCredentialError, make_credential

    if (args.add or args.delete) and not args.user:
        return _fail("--user is required with --add and --delete")
    if args.add and args.password is None:
        return _fail("--password is required with --add")
    if getattr(args, "bootstrap_server", None):
        if args.config or args.override:
            return _fail("give --bootstrap-server (online) or --config/--override (offline), not both")
        return _run_online(args)
    if getattr(args, "command_config", None):
        return _fail("--command-config goes with --bootstrap-server")
    try:
        with offline_store(args, CredentialStore, "users") as store:
            if args.list:
                for user, mechanisms in sorted(store.describe().items()):
                    print(f"User:{user} " + " ".join(f"{m}(iterations={n})" for m, n in mechanisms))
                return 0
            if args.add:
                for mechanism in args.mechanism or MECHANISMS:
                    store.upsert(args.user, make_credential(mechanism, args.password, args.iterations))
                print(
                    f"User:{args.user}: {', '.join(args.mechanism or MECHANISMS)} credentials set in {store.location}"
                )
                return 0
            described = dict(store.describe([args.user])).get(args.user, [])
            present = [str(m) for m, _ in described]
            wanted = args.mechanism or present
            missing = [m for m in wanted if m not in present]
            if not present or missing:
                return _fail(f"User:{args.user} has no {', '.join(missing) or 'SCRAM'} credential in {store.location}")
            for mechanism in wanted:
                store.delete(args.user, mechanism)
            print(f"User:{args.user}: {', '.join(wanted)} credentials deleted from {store.location}")
            return 0
    except (ToolError, UnacceptableCredentialError, ValueError) as exc:
        return _fail(str(exc))


def _run_online(args: argparse.Namespace) -> int:
    """--add/--delete/--list through a running broker (alter/describe_user_scram_credentials)."""
    from triolog.client.admin_core import UserScramCredentialDeletion, UserScramCredentialUpsertion

    try:
        with online_admin(args, "triolog-users") as admin:
            if args.list:
                for user, described in sorted(admin.describe_user_scram_credentials().items()):
                    print(
                        f"User:{user} "
                        + " ".join(f"{i.mechanism}(iterations={i.iterations})" for i in described.credential_infos)
                    )
                return 0
            if args.add:
                mechanisms = args.mechanism or list(MECHANISMS)
                admin.alter_user_scram_credentials(
                    [
                        UserScramCredentialUpsertion(args.user, mechanism, args.password, args.iterations)
                        for mechanism in mechanisms
                    ]
                )
                print(f"User:{args.user}: {', '.join(mechanisms)} credentials set on {args.bootstrap_server}")
                return 0
            described = admin.describe_user_scram_credentials().get(args.user)
            present = [i.mechanism for i in described.credential_infos] if described else []
            wanted = args.mechanism or present
            missing = [m for m in wanted if m not in present]
            if not present or missing:
                return _fail(
                    f"User:{args.user} has no {', '.join(missing) or 'SCRAM'} credential on {args.bootstrap_server}"
                )
            admin.alter_user_scram_credentials([UserScramCredentialDeletion(args.user, m) for m in wanted])
            print(f"User:{args.user}: {', '.join(wanted)} credentials deleted on {args.bootstrap_server}")
            return 0
    except ToolError as exc:
        return _fail(str(exc))


def _fail(message: str) -> int:
    print(f"triolog users: {message}", file=sys.stderr)
    return 1
