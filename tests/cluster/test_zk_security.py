"""A cluster's users, ACLs and client quotas live in ZooKeeper, in Kafka's layout, and every broker
enforces the same set: real ZooKeeper, real brokers on 127.0.0.1, `triolog users`, `triolog acls`
and `triolog configs` against one broker and logins and checks against another.

The brokers' msgpack listener is SASL_PLAINTEXT with the authorizer on and User:admin a super
user; admin's credential is written into ZooKeeper before the brokers start, as Kafka's
``kafka-configs.sh --zookeeper`` bootstrapped a cluster (and in its format, written here by hand).
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time

import pytest
import scramp
from kazoo.client import KazooClient

from triolog.broker.security.acl import AccessControlEntry, AclBinding, ResourcePattern
from triolog.broker.security.quotas import QuotaEntity
from triolog.broker.security.scram import make_credential
from triolog.testing import InProcessBroker, run_cli

from .helpers import all_registered, wait_until

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def cli(*args: str) -> subprocess.CompletedProcess:
    done = run_cli(*args)
    return subprocess.CompletedProcess(["triolog", *args], done.code, done.out, done.stderr)


def kafka_credential(password: str, mechanism: str = "SCRAM-SHA-256") -> str:
    """ScramCredentialUtils.credentialToString's string, made here from scramp alone."""
    salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=4096
    )
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"


@pytest.fixture
def zk(zk_connect):
    hosts, chroot = zk_connect.split("/", 1)
    root = KazooClient(hosts=hosts, timeout=4.0)
    root.start(timeout=15)
    root.ensure_path(f"/{chroot}")
    root.stop()
    root.close()
    client = KazooClient(hosts=zk_connect, timeout=4.0)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def read_json(zk, path):
    data, _ = zk.get(path)
    return json.loads(data)


class SecureCluster:
    """Brokers of one cluster with a SASL_PLAINTEXT msgpack listener, and the CLI against them."""

    def __init__(self, tmp_path, zk_connect, connect_override=None):
        self.tmp_path = tmp_path
        self.zk_connect = connect_override or zk_connect
        self.brokers: dict[int, InProcessBroker] = {}
        self._configs: dict[tuple[str, str], str] = {}

    def start(self, *ids: int) -> None:
        for broker_id in ids:
            self.brokers[broker_id] = InProcessBroker(
                self.tmp_path / f"broker-{broker_id}",
                [
                    f"broker.id={broker_id}",
                    f"zookeeper.connect={self.zk_connect}",
                    "zookeeper.session.timeout.ms=4000",
                    AUTHORIZER,
                    "super.users=User:admin;User:ANONYMOUS",
                    "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
                ],
                security="SASL_PLAINTEXT",
            ).start()
        all_registered(self.brokers)

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()

    def login(self, user: str, password: str) -> list[str]:
        key = (user, password)
        if key not in self._configs:
            path = self.tmp_path / f"{user}-{len(self._configs)}.properties"
            path.write_text(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                f"sasl.username={user}\nsasl.password={password}\n"
            )
            self._configs[key] = str(path)
        return ["--command-config", self._configs[key]]

    def on(self, broker_id: int, user: str = "admin", password: str = "admin-secret") -> list[str]:
        """The options of a CLI call to broker ``broker_id`` as ``user``."""
        return ["--bootstrap-server", f"127.0.0.1:{self.brokers[broker_id].port}", *self.login(user, password)]


@pytest.fixture
def cluster(tmp_path, zk_connect, zk):
    zk.ensure_path("/config/users")
    config = {"version": 1, "config": {"SCRAM-SHA-256": kafka_credential("admin-secret")}}
    zk.create("/config/users/admin", json.dumps(config).encode())
    secure = SecureCluster(tmp_path, zk_connect)
    yield secure
    secure.stop()


def can_list_topics(cluster, broker_id, user, password) -> bool:
    return cli("topics", *cluster.on(broker_id, user, password), "--list").returncode == 0


def test_a_user_added_through_one_broker_logs_in_on_every_other(cluster, zk):
    cluster.start(1, 2, 3)
    done = cli("users", *cluster.on(1), "--add", "--user", "erin", "--password", "erin-secret",
               "--mechanism", "SCRAM-SHA-256")
    assert done.returncode == 0, done.stderr
    # Each broker follows ZooKeeper on its own: each within a moment.
    assert wait_until(lambda: can_list_topics(cluster, 2, "erin", "erin-secret"))
    assert wait_until(lambda: can_list_topics(cluster, 3, "erin", "erin-secret"))
    assert not can_list_topics(cluster, 3, "erin", "wrong")
    # The same answer from every broker.
    for broker_id in (1, 2, 3):
        done = cli("users", *cluster.on(broker_id), "--list")
        assert done.stdout == "User:admin SCRAM-SHA-256(iterations=4096)\nUser:erin SCRAM-SHA-256(iterations=4096)\n"
    # Kafka's znode: one key per mechanism, ScramCredentialUtils' string; and its notification.
    doc = read_json(zk, "/config/users/erin")
    assert list(doc) == ["version", "config"] and doc["version"] == 1 and list(doc["config"]) == ["SCRAM-SHA-256"]
    fields = dict(part.split("=", 1) for part in doc["config"]["SCRAM-SHA-256"].split(","))
    assert list(fields) == ["salt", "stored_key", "server_key", "iterations"] and fields["iterations"] == "4096"
    notes = [read_json(zk, f"/config/changes/{n}") for n in sorted(zk.get_children("/config/changes"))]
    assert {"version": 2, "entity_path": "users/erin"} in notes
    assert all(n.startswith("config_change_") for n in zk.get_children("/config/changes"))

    done = cli("users", *cluster.on(2), "--delete", "--user", "erin")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: not can_list_topics(cluster, 1, "erin", "erin-secret"))
    assert wait_until(lambda: not can_list_topics(cluster, 3, "erin", "erin-secret"))


def test_an_acl_added_through_one_broker_is_enforced_by_another_and_a_late_broker(cluster, zk):
    cluster.start(1, 2)
    assert cli("users", *cluster.on(1), "--add", "--user", "alice", "--password", "alice-secret").returncode == 0
    alice = ("alice", "alice-secret")
    assert wait_until(lambda: can_list_topics(cluster, 2, *alice))
    describe = lambda broker_id: cli("configs", *cluster.on(broker_id, *alice), "--describe",  # noqa: E731
                                     "--entity-type", "users")
    assert "CLUSTER_AUTHORIZATION_FAILED" in describe(1).stderr
    done = cli("acls", *cluster.on(2), "--add", "--allow-principal", "User:alice", "--operation", "DescribeConfigs",
               "--cluster")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: describe(1).returncode == 0)
    assert read_json(zk, "/kafka-acl/Cluster/kafka-cluster") == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "DescribeConfigs", "host": "*"}]}
    assert zk.get("/kafka-acl-changes/" + zk.get_children("/kafka-acl-changes")[0])[0] == b"Cluster:kafka-cluster"
    # A prefixed ACL, Kafka's extended layout.
    done = cli("acls", *cluster.on(1), "--add", "--deny-principal", "User:alice", "--operation", "Write",
               "--topic", "pay", "--resource-pattern-type", "prefixed")
    assert done.returncode == 0, done.stderr
    assert read_json(zk, "/kafka-acl-extended/prefixed/Topic/pay")["acls"] == [
        {"principal": "User:alice", "permissionType": "Deny", "operation": "Write", "host": "*"}]
    change = zk.get_children("/kafka-acl-extended-changes")[0]
    assert read_json(zk, f"/kafka-acl-extended-changes/{change}") == {
        "version": 1, "resourceType": "TOPIC", "name": "pay", "patternType": "PREFIXED"}

    # A broker started now loads the set; every broker lists the same ACLs.
    cluster.start(3)
    assert describe(3).returncode == 0
    listed = lambda: [cli("acls", *cluster.on(b), "--list").stdout for b in (1, 2, 3)]  # noqa: E731
    assert wait_until(lambda: len(set(listed())) == 1)
    assert "pay" in listed()[0] and "kafka-cluster" in listed()[0]

    done = cli("acls", *cluster.on(3), "--remove", "--cluster")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: "CLUSTER_AUTHORIZATION_FAILED" in describe(1).stderr)
    assert wait_until(lambda: "CLUSTER_AUTHORIZATION_FAILED" in describe(2).stderr)
    assert not zk.exists("/kafka-acl/Cluster/kafka-cluster")


def test_a_quota_set_through_one_broker_is_in_force_on_another(cluster, zk):
    cluster.start(1, 2)
    done = cli("configs", *cluster.on(1), "--alter", "--user", "carol", "--add-config",
               "producer_byte_rate=1024,request_percentage=200")
    assert done.returncode == 0, done.stderr
    done = cli("configs", *cluster.on(1), "--alter", "--user", "carol", "--client", "app one", "--add-config",
               "consumer_byte_rate=2048")
    assert done.returncode == 0, done.stderr
    assert read_json(zk, "/config/users/carol") == {
        "version": 1, "config": {"producer_byte_rate": "1024", "request_percentage": "200.0"}}
    assert read_json(zk, "/config/users/carol/clients/app%20one") == {
        "version": 1, "config": {"consumer_byte_rate": "2048"}}
    quotas = lambda broker: broker.server.quotas.store  # noqa: E731
    b2 = cluster.brokers[2]
    assert wait_until(lambda: quotas(b2).quota_for("consumer_byte_rate", "carol", "app one") is not None)
    assert quotas(b2).quota_for("producer_byte_rate", "carol", "x") == (1024.0, QuotaEntity.of(user="carol"))
    assert quotas(b2).quota_for("consumer_byte_rate", "carol", "app one") == (
        2048.0, QuotaEntity.of(user="carol", client_id="app one"))
    described = lambda: [cli("configs", *cluster.on(b), "--describe", "--entity-type", "users").stdout  # noqa: E731
                         for b in (1, 2)]
    assert wait_until(lambda: len(set(described())) == 1) and "producer_byte_rate=1024" in described()[0]

    # Defaults are <default>; IPs are entities of their own.
    done = cli("configs", *cluster.on(1), "--alter", "--user-defaults", "--add-config", "consumer_byte_rate=777")
    assert done.returncode == 0, done.stderr
    done = cli("configs", *cluster.on(1), "--alter", "--ip", "10.1.2.3", "--add-config", "connection_creation_rate=5")
    assert done.returncode == 0, done.stderr
    assert read_json(zk, "/config/users/<default>") == {"version": 1, "config": {"consumer_byte_rate": "777"}}
    assert read_json(zk, "/config/ips/10.1.2.3") == {"version": 1, "config": {"connection_creation_rate": "5"}}
    assert wait_until(lambda: quotas(b2).quota_for("consumer_byte_rate", "zed", "c") == (
        777.0, QuotaEntity.of(user=None)))
    assert wait_until(lambda: quotas(b2).ip_quota("10.1.2.3") == 5.0)

    done = cli("configs", *cluster.on(2), "--alter", "--user", "carol", "--delete-config", "producer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: cluster.brokers[1].server.quotas.store.quota_for("producer_byte_rate", "carol", "x")
                      is None)
    assert read_json(zk, "/config/users/carol")["config"] == {"request_percentage": "200.0"}


def test_concurrent_changes_through_two_brokers_all_survive(cluster, zk):
    """Two brokers add ACLs to one resource, and credentials and quotas to one user znode, at once:
    the version-checked writes retry, and nothing is lost."""
    cluster.start(1, 2)
    b1, b2 = cluster.brokers[1].server, cluster.brokers[2].server
    pattern = ResourcePattern("TOPIC", "shared")
    errors = []

    def add_acls(server, first):
        try:
            for i in range(first, first + 15):
                server.acls.create([AclBinding(pattern, AccessControlEntry(f"User:u{i}", "*", "READ", "ALLOW"))])
        except BaseException as exc:  # reported below
            errors.append(exc)

    def alter_user(server, mechanism, key):
        try:
            server.credentials.upsert("dana", make_credential(mechanism, "dana-secret"))
            for value in range(1000, 1010):
                server.quotas.store.alter([(QuotaEntity.of(user="dana"), {key: value})])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=add_acls, args=(b1, 0)),
        threading.Thread(target=add_acls, args=(b2, 100)),
        threading.Thread(target=alter_user, args=(b1, "SCRAM-SHA-256", "producer_byte_rate")),
        threading.Thread(target=alter_user, args=(b2, "SCRAM-SHA-512", "consumer_byte_rate")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(read_json(zk, "/kafka-acl/Topic/shared")["acls"]) == 30
    config = read_json(zk, "/config/users/dana")["config"]
    assert sorted(config) == ["SCRAM-SHA-256", "SCRAM-SHA-512", "consumer_byte_rate", "producer_byte_rate"]
    assert (config["producer_byte_rate"], config["consumer_byte_rate"]) == ("1009", "1009")
    for server in (b1, b2):
        assert wait_until(lambda s=server: len(s.acls.authorizer.bindings()) == 30)
        assert wait_until(lambda s=server: s.credentials.describe(["dana"]) == {
            "dana": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]})


def test_invalid_znodes_keep_the_last_good_set(cluster, zk):
    """Bytes that are not Kafka's JSON, written behind the brokers' backs: logged, the ACLs and the
    credentials in force stay; a broker started on them refuses to start, naming the znode."""
    cluster.start(1)
    assert cli("acls", *cluster.on(1), "--add", "--deny-principal", "User:alice", "--operation", "All",
               "--topic", "secret").returncode == 0
    server = cluster.brokers[1].server
    denied = lambda: not server.acls.authorize("User:alice", "127.0.0.1", "READ", "TOPIC", "secret")  # noqa: E731
    assert denied()
    zk.set("/kafka-acl/Topic/secret", b'{"version":1,"acls":[{"principal":"User:alice"')
    zk.create("/kafka-acl-changes/acl_changes_", b"Topic:secret", sequence=True)
    zk.set("/config/users/admin", b"not json")
    zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"users/admin"}', sequence=True)
    invalid = lambda: [e for e in cluster.brokers[1].events() if e["event"] == "security_metadata_invalid"]  # noqa: E731
    assert wait_until(lambda: len(invalid()) >= 2)
    assert {e["level"] for e in invalid()} == {"error"}
    assert any("/kafka-acl/Topic/secret" in e["error"] for e in invalid())
    assert denied()
    assert can_list_topics(cluster, 1, "admin", "admin-secret")

    (cluster.tmp_path / "late").mkdir()
    late = SecureCluster(cluster.tmp_path / "late", cluster.zk_connect)
    with pytest.raises(Exception, match="ZooKeeper holds invalid"):
        late.start(2)


def test_losing_zookeeper_keeps_the_set_in_force_and_a_new_session_follows_again(tmp_path):
    """Every ZooKeeper node paused past the brokers' session timeout: meanwhile the users still log
    in and the ACLs still hold (nothing is emptied, nothing opened); once it answers again, the
    brokers' new sessions read the set again and follow its changes."""
    from .zookeeper import ZooKeeperEnsemble

    ensemble = ZooKeeperEnsemble(tmp_path / "zookeeper", size=3).start()
    secure = None
    try:
        connect = ensemble.connect("/secure")
        root = KazooClient(hosts=ensemble.connect(), timeout=4.0)
        root.start(timeout=15)
        config = {"version": 1, "config": {"SCRAM-SHA-256": kafka_credential("admin-secret")}}
        root.create("/secure/config/users/admin", json.dumps(config).encode(), makepath=True)
        root.stop()
        root.close()
        secure = SecureCluster(tmp_path, connect)
        secure.start(1, 2)
        assert cli("users", *secure.on(1), "--add", "--user", "alice", "--password", "alice-secret").returncode == 0
        done = cli("acls", *secure.on(1), "--add", "--allow-principal", "User:alice", "--operation",
                   "DescribeConfigs", "--cluster")
        assert done.returncode == 0, done.stderr
        alice = secure.on(2, "alice", "alice-secret")
        describe = lambda: cli("configs", *alice, "--describe", "--entity-type", "users")  # noqa: E731
        assert wait_until(lambda: describe().returncode == 0)

        for node in ensemble.nodes:
            ensemble.pause(node)
        try:
            stores = [b.server.membership.zk.store for b in secure.brokers.values()]
            assert wait_until(lambda: all(s.state.value != "connected" for s in stores), 30)
            for _ in range(3):  # over several seconds, past the session timeout
                done = describe()
                assert done.returncode == 0, done.stderr
                assert not can_list_topics(secure, 2, "alice", "wrong")
                other = cli("configs", *secure.on(2, "alice", "alice-secret"), "--alter", "--user", "x",
                            "--add-config", "producer_byte_rate=1")
                assert "CLUSTER_AUTHORIZATION_FAILED" in other.stderr
                time.sleep(2)
        finally:
            for node in ensemble.nodes:
                ensemble.resume(node)
        ensemble.wait_serving(60)
        reloaded = lambda b: any(e["event"] == "security_metadata_reloaded" for e in b.events())  # noqa: E731
        assert wait_until(lambda: all(reloaded(b) for b in secure.brokers.values()), 60)
        done = cli("users", *secure.on(1), "--add", "--user", "frank", "--password", "frank-secret")
        if done.returncode != 0:  # the first call may meet the session being made again
            assert wait_until(lambda: cli("users", *secure.on(1), "--add", "--user", "frank", "--password",
                                          "frank-secret").returncode == 0, 60)
        assert wait_until(lambda: can_list_topics(secure, 2, "frank", "frank-secret"), 60)
        assert describe().returncode == 0
    finally:
        if secure is not None:
            secure.stop()
        ensemble.stop()


def test_a_quota_set_through_one_broker_throttles_on_another(cluster):
    """librdkafka producing to the partition's leader as a client id whose quota was set through
    the other broker: the leader's answers carry a throttle time."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster.start(1, 2)
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("thr", 1, 2)])["thr"].result(30)
    leader = lambda: cluster.brokers[1].server.cluster.cache.partition("thr", 0)  # noqa: E731
    assert wait_until(lambda: leader() is not None and leader().online)
    other = 2 if leader().leader == 1 else 1
    done = cli("configs", *cluster.on(other), "--alter", "--client", "slow-app", "--add-config",
               "producer_byte_rate=2000")
    assert done.returncode == 0, done.stderr
    leading = cluster.brokers[leader().leader]
    assert wait_until(lambda: leading.server.quotas.store.quota_for("producer_byte_rate", "ANONYMOUS", "slow-app"))

    throttles = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{leading.kafka_port}", "client.id": "slow-app", "linger.ms": 5, "acks": 1,
        "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    deadline = time.monotonic() + 30
    while not any(t > 0 for t in throttles) and time.monotonic() < deadline:
        producer.produce("thr", b"v" * 1000)
        producer.poll(0.05)
    producer.purge()
    assert any(t > 0 for t in throttles), throttles


def test_the_tools_without_bootstrap_server_change_the_cluster_in_zookeeper(cluster, zk, tmp_path):
    """With zookeeper.connect in the configuration, `triolog users`, `acls` and `configs` change
    ZooKeeper itself (Kafka's ``kafka-configs.sh --zookeeper``): how a cluster whose listeners all
    need a login gets its first user. The running brokers follow."""
    cluster.start(1)
    where = ["--override", f"zookeeper.connect={cluster.zk_connect}", "--override", f"log.dirs={tmp_path / 'tool'}"]
    done = cli("users", *where, "--add", "--user", "gina", "--password", "gina-secret")
    assert done.returncode == 0, done.stderr
    assert sorted(read_json(zk, "/config/users/gina")["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert wait_until(lambda: can_list_topics(cluster, 1, "gina", "gina-secret"))
    done = cli("users", *where, "--list")
    assert done.stdout == ("User:admin SCRAM-SHA-256(iterations=4096)\n"
                           "User:gina SCRAM-SHA-256(iterations=4096) SCRAM-SHA-512(iterations=4096)\n")
    done = cli("acls", *where, "--add", "--allow-principal", "User:gina", "--operation", "Read", "--topic", "t1")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: cluster.brokers[1].server.acls.authorize("User:gina", "h", "READ", "TOPIC", "t1"))
    done = cli("configs", *where, "--alter", "--user", "gina", "--add-config", "consumer_byte_rate=5000")
    assert done.returncode == 0, done.stderr
    assert read_json(zk, "/config/users/gina")["config"]["consumer_byte_rate"] == "5000"
    assert wait_until(lambda: cluster.brokers[1].server.quotas.store.quota_for("consumer_byte_rate", "gina", "c"))
    done = cli("users", *where, "--delete", "--user", "gina", "--mechanism", "SCRAM-SHA-512")
    assert done.returncode == 0, done.stderr
    assert sorted(read_json(zk, "/config/users/gina")["config"]) == ["SCRAM-SHA-256", "consumer_byte_rate"]


def test_an_acl_on_a_name_zookeeper_cannot_hold_is_refused_alone(cluster, zk):
    cluster.start(1)
    done = cli("acls", *cluster.on(1), "--add", "--allow-principal", "User:a", "--operation", "Read",
               "--group", "a/b")
    assert done.returncode == 1 and "cannot be stored in ZooKeeper" in done.stderr, done.stderr
    assert zk.get_children("/kafka-acl") == [] or "Group" not in zk.get_children("/kafka-acl")


async def test_handled_notifications_expire_and_are_deleted(zk_connect):
    """Kafka's brokers deleted the change notifications older than 15 minutes; here with an expiry
    of 0, two sessions of real ZooKeeper: one writes, the other follows and deletes."""
    import trio

    from triolog.broker.cluster.zk_security import ZkSecurityMetadata
    from triolog.broker.cluster.zookeeper_store import ZooKeeperStore

    writer_store, follower_store = ZooKeeperStore(zk_connect), ZooKeeperStore(zk_connect)
    await writer_store.start()
    await follower_store.start()
    try:
        writer = ZkSecurityMetadata(writer_store)
        follower = ZkSecurityMetadata(follower_store, notification_expiry_ms=0)
        await writer.load()
        await follower.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(follower.run)
            credential = await trio.to_thread.run_sync(make_credential, "SCRAM-SHA-256", "x-secret")
            await trio.to_thread.run_sync(writer.credentials.upsert, "xena", credential)
            with trio.fail_after(20):
                while follower.credentials.get("xena", "SCRAM-SHA-256") is None:
                    await trio.sleep(0.05)
                while await follower_store.children("/config/changes"):
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert follower.credentials.get("xena", "SCRAM-SHA-256") == credential
    finally:
        await writer_store.close()
        await follower_store.close()
