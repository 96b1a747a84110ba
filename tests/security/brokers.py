"""What the security tests set brokers up with: users added as an operator adds them (`triolog
users`, offline, before the start), the authorizer key, and the SASL_SSL broker with an admin
super user several files test against."""

from __future__ import annotations

from tests.e2e.broker_process import InProcessBroker
from triolog.testing import run_cli

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def add_user(data_dir, user: str, password: str, *mechanisms: str) -> None:
    """``triolog users --add`` on a stopped broker's data (both SCRAM mechanisms unless given)."""
    args = ["users", "--add", "--user", user, "--password", password, "--override", f"log.dirs={data_dir}"]
    for mechanism in mechanisms:
        args += ["--mechanism", mechanism]
    done = run_cli(*args)
    assert done.code == 0, done.stderr


def sasl_ssl_broker(data_dir, tls, mechanisms: str) -> InProcessBroker:
    """A started SASL_SSL broker offering ``mechanisms``, with the authorizer on, users admin
    (the super user) and alice (no ACLs), each with password ``<name>-secret``."""
    for user in ("admin", "alice"):
        add_user(data_dir, user, f"{user}-secret")
    return InProcessBroker(data_dir, security="SASL_SSL", overrides=(
        f"ssl.keystore.location={tls.keystore}", f"sasl.enabled.mechanisms={mechanisms}",
        AUTHORIZER, "super.users=User:admin", "group.initial.rebalance.delay.ms=0")).start()
