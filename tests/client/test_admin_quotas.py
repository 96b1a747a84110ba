"""Client quotas through the admin clients (Kafka's describeClientQuotas / alterClientQuotas),
against a real broker of their own: default entities would throttle the shared one's clients."""

from __future__ import annotations

import pytest

from tests.e2e.broker_process import InProcessBroker
from triolog.client import (AdminClient, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter,
                            ClientQuotaFilterComponent as Component, InvalidRequestError)
from triolog.client.aio import AsyncAdminClient

Op = ClientQuotaAlteration.Op
ALICE = ClientQuotaEntity({"user": "alice"})
ALICE_APP = ClientQuotaEntity({"user": "alice", "client-id": "app"})
APP = ClientQuotaEntity({"client-id": "app"})


@pytest.fixture
def bootstrap(tmp_path):
    process = InProcessBroker(tmp_path / "data").start()
    yield f"127.0.0.1:{process.port}"
    process.stop()


def test_quotas_are_set_described_by_filter_and_removed(bootstrap):
    with AdminClient(bootstrap) as admin:
        assert admin.describe_client_quotas() == {}
        admin.alter_client_quotas([
            ClientQuotaAlteration(ALICE, (Op("producer_byte_rate", 1048576), Op("consumer_byte_rate", 2097152.0))),
            ClientQuotaAlteration(ALICE_APP, (Op("producer_byte_rate", 1000.4),)),  # rounded, as Kafka's listener
            ClientQuotaAlteration(APP, (Op("consumer_byte_rate", 5000),)),
        ])
        assert admin.describe_client_quotas() == {
            ALICE: {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
            ALICE_APP: {"producer_byte_rate": 1000.0},
            APP: {"consumer_byte_rate": 5000.0},
        }
        # contains: every entity with that part; contains_only: nothing else in the entity either
        assert set(admin.describe_client_quotas(ClientQuotaFilter.contains([Component.of_entity("user", "alice")]))) \
            == {ALICE, ALICE_APP}
        assert set(admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_entity("user", "alice")]))) == {ALICE}
        assert set(admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_entity_type("client-id")]))) == {APP}
        assert set(admin.describe_client_quotas(ClientQuotaFilter.contains(
            [Component.of_entity_type("user"), Component.of_entity("client-id", "app")]))) == {ALICE_APP}

        admin.alter_client_quotas([ClientQuotaAlteration(ALICE, (Op("producer_byte_rate", None),))])
        assert admin.describe_client_quotas(ClientQuotaFilter.contains_only([Component.of_entity("user", "alice")])) \
            == {ALICE: {"consumer_byte_rate": 2097152.0}}
        # validate_only checks and changes nothing
        admin.alter_client_quotas([ClientQuotaAlteration(APP, (Op("consumer_byte_rate", None),))], validate_only=True)
        assert APP in admin.describe_client_quotas()


def test_default_entities_are_none(bootstrap):
    default_user = ClientQuotaEntity({"user": None})
    default_ip = ClientQuotaEntity({"ip": None})
    with AdminClient(bootstrap) as admin:
        admin.alter_client_quotas([ClientQuotaAlteration(default_user, (Op("producer_byte_rate", 10_000_000),)),
                                   ClientQuotaAlteration(default_ip, (Op("connection_creation_rate", 100),))])
        assert admin.describe_client_quotas(ClientQuotaFilter.contains([Component.of_default_entity("user")])) == {
            default_user: {"producer_byte_rate": 10_000_000.0}}
        assert admin.describe_client_quotas(ClientQuotaFilter.contains([Component.of_default_entity("ip")])) == {
            default_ip: {"connection_creation_rate": 100.0}}


def test_each_alteration_succeeds_or_fails_on_its_own(bootstrap):
    bad_key = ClientQuotaEntity({"client-id": "typo"})
    bad_kind = ClientQuotaEntity({"ip": "10.0.0.1"})
    with AdminClient(bootstrap) as admin:
        results = admin.alter_client_quotas([
            ClientQuotaAlteration(APP, (Op("producer_byte_rate", 100_000),)),
            ClientQuotaAlteration(bad_key, (Op("producer_byte_rat", 100_000),)),
            ClientQuotaAlteration(bad_kind, (Op("producer_byte_rate", 100_000),)),
        ], raise_errors=False)
        assert results[APP] is None
        assert isinstance(results[bad_key], InvalidRequestError) and results[bad_key].entity == bad_key
        assert "producer_byte_rat" in str(results[bad_key])
        assert isinstance(results[bad_kind], InvalidRequestError) and "ip" in str(results[bad_kind])
        with pytest.raises(InvalidRequestError, match="positive"):
            admin.alter_client_quotas([ClientQuotaAlteration(ALICE, (Op("consumer_byte_rate", 0),))])
        assert set(admin.describe_client_quotas()) == {APP}


def test_bad_entities_and_values_are_refused_before_sending():
    with pytest.raises(ValueError, match="unknown quota entity type 'group'"):
        ClientQuotaEntity({"group": "g"})
    with pytest.raises(ValueError, match="unknown quota entity type"):
        Component.of_entity("users", "alice")  # kafka-configs.sh's word, not the entity type
    with AdminClient("127.0.0.1:1") as admin:  # nothing is sent: no broker needed
        with pytest.raises(ValueError, match="finite number"):
            admin.alter_client_quotas([ClientQuotaAlteration(ALICE, (Op("producer_byte_rate", float("inf")),))])


async def test_the_trio_admin_client_alters_and_describes_quotas(bootstrap):
    async with AsyncAdminClient(bootstrap) as admin:
        results = await admin.alter_client_quotas([ClientQuotaAlteration(ALICE_APP, (Op("producer_byte_rate", 4096),)),
                                                   ClientQuotaAlteration(ALICE, (Op("bogus", 1),))],
                                                  raise_errors=False)
        assert results[ALICE_APP] is None and isinstance(results[ALICE], InvalidRequestError)
        assert await admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_entity("user", "alice"), Component.of_entity("client-id", "app")])) == {
            ALICE_APP: {"producer_byte_rate": 4096.0}}
        with pytest.raises(InvalidRequestError):
            await admin.alter_client_quotas([ClientQuotaAlteration(ALICE, (Op("bogus", 1),))])
