"""ssl.principal.mapping.rules: the user a client certificate names, Kafka's rule language and
its use on an SSL listener (real broker, certificates made at test time)."""

from __future__ import annotations

import pytest
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st

from tests.e2e.broker_process import InProcessBroker
from triolog.client import AdminClient
from triolog.client.errors import TopicAuthorizationFailedError, TriologClientError
from triolog.config.broker_config import BrokerConfig, ConfigError
from triolog.config.principal_rules import NoMatchingRule, PrincipalMappingRules

from .tls_certs import make_tls_files

SUBJECT = "CN=Alice,OU=Payments,O=Acme\\, Inc,C=DE"


@pytest.mark.parametrize("rules, name", [
    ("DEFAULT", SUBJECT),
    ("RULE:^CN=([^,]*),.*$/$1/", "Alice"),
    ("RULE:^CN=([^,]*),.*$/$1/L", "alice"),
    ("RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/U", "ALICE@PAYMENTS"),
    # the first rule that applies wins; one matching only part of the subject does not apply
    ("RULE:^CN=Bob,.*$/bob/, RULE:OU=Payments/payments/, RULE:^.*OU=([^,]*).*$/team-$1/L, DEFAULT", "team-payments"),
    ("RULE:^CN=Bob,.*$/bob/,DEFAULT", SUBJECT),
    # an escaped slash and comma in a replacement; $12 with one group is group 1 then "2" (Kafka's)
    (r"RULE:^CN=([^,]*),.*$/users\/$1\,x/", "users/Alice,x"),
    ("RULE:^CN=([^,]*),.*$/$12/", "Alice2"),
    ("RULE:^CN=[^,]*,.*$/$1/", "$1"),  # no group: a literal
])
def test_rules_name_the_subject_as_kafka(rules, name):
    assert PrincipalMappingRules(rules).name(SUBJECT) == name


def test_a_subject_no_rule_applies_to_is_refused():
    with pytest.raises(NoMatchingRule, match="no ssl.principal.mapping.rules rule applies"):
        PrincipalMappingRules("RULE:^CN=Bob,.*$/bob/").name(SUBJECT)


@pytest.mark.parametrize("rules", ["DEFAULTS", "RULE:^CN=(.*)$/$1/X", "RULE:^CN=(.*$/$1/", "CN=alice"])
def test_a_bad_rule_stops_the_broker_at_startup_naming_the_key(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        BrokerConfig.from_properties({"ssl.principal.mapping.rules": rules})


def test_the_rules_are_read_from_the_config():
    config, _ = BrokerConfig.from_properties({"ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT"})
    assert config.ssl_principal_mapping_rules.name(SUBJECT) == "alice"
    assert BrokerConfig.from_properties({})[0].ssl_principal_mapping_rules.name(SUBJECT) == SUBJECT


@given(st.text(min_size=1).filter(lambda s: "\n" not in s))
def test_default_is_the_subject_and_case_rules_only_change_case(subject):
    assert PrincipalMappingRules("DEFAULT").name(subject) == subject
    assert PrincipalMappingRules("RULE:(?s)(.*)/$1/L").name(subject) == subject.lower()


# -- on an SSL listener with client certificates ---------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _mtls_broker(tmp_path, tls, *overrides) -> InProcessBroker:
    """An SSL listener that requires a client certificate, with an authorizer: who the client
    is decides whether it may create a topic."""
    tmp_path.mkdir(exist_ok=True)
    return InProcessBroker(tmp_path / "data", security="SSL", metrics=True, overrides=(
        f"ssl.keystore.location={tls.keystore}", f"ssl.truststore.location={tls.ca_pem}",
        "ssl.client.auth=required", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        *overrides)).start()


def _admin(broker, tls) -> AdminClient:
    return AdminClient(f"127.0.0.1:{broker.port}", security_protocol="SSL", ssl_cafile=str(tls.ca_pem),
                       ssl_certfile=str(tls.client_cert), ssl_keyfile=str(tls.client_key))


def _subject(tls) -> str:
    """The client certificate's subject as RFC 4514 (RFC 2253's successor) writes it, by
    cryptography: what Kafka's principal builder names the client."""
    return x509.load_pem_x509_certificate(tls.client_cert.read_bytes()).subject.rfc4514_string()


@pytest.mark.parametrize("rules, principal", [
    ("DEFAULT", None),  # the whole subject
    ("RULE:^CN=([^,]*),.*$/$1/U, DEFAULT", "User:ALICE"),
])
def test_the_client_certificate_names_the_user_the_rules_make_of_it(tmp_path, tls, rules, principal):
    principal = principal or "User:" + _subject(tls)
    broker = _mtls_broker(tmp_path, tls, f"ssl.principal.mapping.rules={rules}", f"super.users={principal}")
    try:
        with _admin(broker, tls) as admin:
            admin.create_topics(["made-by-the-super-user"])
            assert "made-by-the-super-user" in admin.list_topics()
    finally:
        broker.stop()
    # the same certificate, another name: not the super user, so it may not create topics
    broker = _mtls_broker(tmp_path / "other", tls, f"ssl.principal.mapping.rules={rules}", "super.users=User:alice")
    try:
        with _admin(broker, tls) as admin, pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics(["refused"])
    finally:
        broker.stop()


def test_a_client_no_rule_names_is_refused_and_counted(tmp_path, tls):
    broker = _mtls_broker(tmp_path, tls, "ssl.principal.mapping.rules=RULE:^CN=bob,.*$/bob/")
    try:
        with pytest.raises(TriologClientError):
            with _admin(broker, tls) as admin:
                admin.list_topics()
        assert broker.sample("triolog_auth_failures_total", mechanism="SSL") >= 1
        assert "tls_principal_unmapped" in broker.log_text()
    finally:
        broker.stop()
