"""Command-line tools on the broker's files: dump-log reads segments; users, acls and configs (client
quotas) change a stopped broker's security files, or a running one's through its admin API."""


def add_location_arguments(parser) -> None:
    """Where `triolog users`, `triolog acls` and `triolog configs` act: online through a running broker, or offline
    on a stopped broker's data (found as serve finds it)."""
    online = parser.add_argument_group("online (through a running broker)")
    online.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the broker to connect to")
    online.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties for TLS/SASL (security.protocol, sasl.*, ssl.*)")
    offline = parser.add_argument_group("offline (a stopped broker's data)")
    offline.add_argument("--config", metavar="FILE", help="the broker's server.properties file, as for serve")
    offline.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                         help="one config key, as for serve (repeatable)")
