"""The CLI against secured brokers: ``--command-config`` (Kafka's client properties) on the client
tools, ``triolog acls`` online and offline, ``triolog users`` and ``triolog configs`` online; real broker
processes."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.broker_process import InProcessBroker
from triolog.testing import run_cli
from triolog.client.security import load_command_config, parse_properties

from .brokers import AUTHORIZER, add_user, sasl_ssl_broker
from .tls_certs import make_tls_files


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``triolog ARGS`` through its main() in this process (triolog.testing.run_cli), as text."""
    done = run_cli(*args, stdin=(stdin or "").encode())
    return subprocess.CompletedProcess(["triolog", *args], done.code, done.out, done.stderr)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls):
    process = sasl_ssl_broker(tmp_path_factory.mktemp("cli-sasl-ssl") / "data", tls, "SCRAM-SHA-512,SCRAM-SHA-256")
    yield process
    process.stop()


def _properties(path, tls, user: str, password: str, *, jaas: bool = False) -> str:
    lines = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512", f"ssl.truststore.location={tls.ca_pem}"]
    if jaas:
        lines.append('sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                     f'username="{user}" password="{password}";')
    else:
        lines += [f"sasl.username={user}", f"sasl.password={password}"]
    path.write_text("# client settings\n" + "\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def admin_config(tmp_path_factory, tls):
    return _properties(tmp_path_factory.mktemp("props") / "admin.properties", tls, "admin", "admin-secret", jaas=True)


def test_properties_files_parse_as_kafka_reads_them(tmp_path, tls):
    assert parse_properties("a=1\n# c\n! c\nb : two\\\n   words\nc d\n") == {"a": "1", "b": "twowords", "c": "d"}
    security = load_command_config(_properties(tmp_path / "p", tls, "u", 'p"w', jaas=False))
    assert (security.security_protocol, security.sasl_mechanism, security.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "u")
    (tmp_path / "j").write_text('security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=org.apache.kafka.common.security.'
                                'plain.PlainLoginModule required username="bob" password="s3 cr=t";\n')
    with pytest.raises(ValueError, match="PLAIN"):  # PLAIN needs TLS
        load_command_config(tmp_path / "j")
    (tmp_path / "j").write_text('security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=org.apache.kafka.common.security.'
                                'scram.ScramLoginModule required username="bob" password="s3 cr=t";\n')
    security = load_command_config(tmp_path / "j")
    assert (security.sasl_username, security.sasl_password, security.sasl_mechanism) == (
        "bob", "s3 cr=t", "SCRAM-SHA-256")


def test_command_config_escapes_are_javas(tmp_path):
    """\\uXXXX, \\r, escaped separators and backslashes mean in a --command-config file what
    Kafka's tools (java.util.Properties) make of them; a malformed escape names the file and line."""
    (tmp_path / "p").write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                                "sasl.username=r\\u00e9n\\u00e9e\\=\\\\x\\ry\nsasl.password=p\n")
    assert load_command_config(tmp_path / "p").sasl_username == "rénée=\\x\ry"
    (tmp_path / "bad").write_text("security.protocol=SASL_PLAINTEXT\nsasl.password=\\u00\n")
    with pytest.raises(ValueError, match=f"{tmp_path / 'bad'}: line 2: malformed"):
        load_command_config(tmp_path / "bad")


def test_produce_and_consume_with_command_config(broker, admin_config):
    server = f"127.0.0.1:{broker.port}"
    done = cli("topics", "--bootstrap-server", server, "--command-config", admin_config, "--create", "--topic", "cli-t")
    assert done.returncode == 0, done.stderr
    done = cli("produce", "--bootstrap-server", server, "--command-config", admin_config, "--topic", "cli-t",
               stdin="one\ntwo\nthree\n")
    assert done.returncode == 0, done.stderr
    done = cli("consume", "--bootstrap-server", server, "--command-config", admin_config, "--topic", "cli-t",
               "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["one", "two", "three"]
    done = cli("health", "--bootstrap-server", server, "--command-config", admin_config)
    assert done.returncode == 0, done.stderr
    # without the settings: the listener is TLS, a plaintext client gets nowhere
    done = cli("topics", "--bootstrap-server", server, "--list")
    assert done.returncode == 1


def test_command_config_with_a_wrong_password_is_one_clear_error(broker, tls, tmp_path):
    wrong = _properties(tmp_path / "wrong.properties", tls, "admin", "nope")
    done = cli("topics", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", wrong, "--list")
    assert done.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in done.stderr and "User:admin" in done.stderr
    done = cli("topics", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config",
               str(tmp_path / "missing.properties"), "--list")
    assert done.returncode == 1 and "cannot read --command-config" in done.stderr


def test_acls_online_add_list_remove(broker, admin_config):
    server = ["--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", admin_config]
    done = cli("acls", *server, "--add", "--allow-principal", "User:alice", "--operation", "Read",
               "--operation", "describe", "--topic", "orders", "--group", "billing")
    assert done.returncode == 0, done.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`" in done.stdout
    done = cli("acls", *server, "--list", "--topic", "orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) "]
    done = cli("acls", *server, "--list")
    assert "resourceType=GROUP, name=billing" in done.stdout and "resourceType=TOPIC, name=orders" in done.stdout
    done = cli("acls", *server, "--remove", "--topic", "orders", "--operation", "Describe",
               "--allow-principal", "User:alice")
    assert done.returncode == 0, done.stderr
    assert "operation=DESCRIBE" in done.stdout and "operation=READ" not in done.stdout
    done = cli("acls", *server, "--remove", "--topic", "orders", "--group", "billing")
    assert done.returncode == 0, done.stderr
    done = cli("acls", *server, "--list")
    assert done.returncode == 0 and done.stdout.strip() == ""


def test_acls_online_as_a_user_without_rights_is_refused(broker, tls, tmp_path):
    alice = _properties(tmp_path / "alice.properties", tls, "alice", "alice-secret")
    done = cli("acls", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", alice, "--add",
               "--allow-principal", "User:alice", "--operation", "All", "--cluster")
    assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr


def test_acls_offline_then_refused_while_the_broker_runs(tmp_path, tls):
    data = tmp_path / "data"
    offline = ["--override", f"log.dirs={data}"]
    done = cli("acls", *offline, "--add", "--allow-principal", "User:alice", "--operation", "Write",
               "--topic", "logs-", "--resource-pattern-type", "prefixed")
    assert done.returncode == 0, done.stderr
    done = cli("acls", *offline, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.1",
               "--operation", "read", "--transactional-id", "tx")
    assert done.returncode == 0, done.stderr
    done = cli("acls", *offline, "--list")
    assert done.returncode == 0, done.stderr
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`: \n"
            " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) ") in done.stdout
    assert "(principal=User:mallory, host=10.0.0.1, operation=READ, permissionType=DENY)" in done.stdout
    done = cli("acls", *offline, "--list", "--topic", "logs-app", "--resource-pattern-type", "match")
    assert "name=logs-, patternType=PREFIXED" in done.stdout
    done = cli("acls", *offline, "--remove", "--transactional-id", "tx")
    assert done.returncode == 0 and "User:mallory" in done.stdout
    add_user(data, "admin", "admin-secret")
    process = InProcessBroker(data, security="SASL_SSL", overrides=(
        f"ssl.keystore.location={tls.keystore}", AUTHORIZER, "super.users=User:admin")).start()
    try:
        done = cli("acls", *offline, "--list")
        assert done.returncode == 1 and "the broker is running" in done.stderr
        admin = _properties(tmp_path / "admin.properties", tls, "admin", "admin-secret")
        done = cli("acls", "--bootstrap-server", f"127.0.0.1:{process.port}", "--command-config", admin, "--list")
        assert done.returncode == 0, done.stderr
        assert "name=logs-, patternType=PREFIXED" in done.stdout and "mallory" not in done.stdout
    finally:
        process.stop()


def test_acls_usage_errors():
    assert cli("acls", "--list").returncode == 2
    assert cli("acls", "--add", "--override", "log.dirs=/nonexistent-x", "--topic", "t").returncode == 2
    done = cli("acls", "--add", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--allow-principal", "User:a",
               "--operation", "Fly")
    assert done.returncode == 2 and "unknown operation" in done.stderr


def test_users_online_add_authenticate_delete(broker, tls, admin_config, tmp_path):
    server = ["--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", admin_config]
    done = cli("users", *server, "--add", "--user", "erin", "--password", "erin-secret", "--mechanism",
               "SCRAM-SHA-512")
    assert done.returncode == 0, done.stderr
    done = cli("users", *server, "--list")
    assert done.returncode == 0 and "User:erin SCRAM-SHA-512(iterations=4096)" in done.stdout
    erin = _properties(tmp_path / "erin.properties", tls, "erin", "erin-secret")
    done = cli("topics", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", erin, "--list")
    assert done.returncode == 0, done.stderr
    done = cli("users", *server, "--delete", "--user", "erin")
    assert done.returncode == 0, done.stderr
    done = cli("topics", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", erin, "--list")
    assert done.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in done.stderr
    done = cli("users", *server, "--delete", "--user", "erin")
    assert done.returncode == 1 and "has no" in done.stderr


def test_configs_quotas_need_the_cluster_acls(broker, tls, admin_config, tmp_path):
    """`triolog configs` online, as Kafka authorizes it: DESCRIBE_CONFIGS on the cluster to
    describe quotas, ALTER_CONFIGS to change them (a super user may do both)."""
    server = ["--bootstrap-server", f"127.0.0.1:{broker.port}"]
    alice = [*server, "--command-config", _properties(tmp_path / "alice.properties", tls, "alice", "alice-secret")]
    admin = [*server, "--command-config", admin_config]
    done = cli("configs", *alice, "--describe", "--entity-type", "users")
    assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    done = cli("configs", *alice, "--alter", "--user", "alice", "--add-config", "producer_byte_rate=999999")
    assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    done = cli("configs", *admin, "--alter", "--user", "carol", "--add-config", "consumer_byte_rate=123456")
    assert done.returncode == 0, done.stderr
    done = cli("acls", *admin, "--add", "--allow-principal", "User:alice", "--operation", "DescribeConfigs",
               "--cluster")
    assert done.returncode == 0, done.stderr
    try:
        done = cli("configs", *alice, "--describe", "--entity-type", "users")
        assert (done.returncode, done.stdout) == (
            0, "Quota configs for user-principal 'carol' are consumer_byte_rate=123456.0\n"), done.stderr
        done = cli("configs", *alice, "--alter", "--user", "carol", "--delete-config", "consumer_byte_rate")
        assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    finally:
        assert cli("acls", *admin, "--remove", "--cluster").returncode == 0
        assert cli("configs", *admin, "--alter", "--user", "carol", "--delete-config", "consumer_byte_rate"
                   ).returncode == 0


def test_users_offline_then_refused_while_the_broker_runs(tmp_path):
    data = tmp_path / "data"
    offline = ["--override", f"log.dirs={data}"]
    done = cli("users", *offline, "--add", "--user", "carol", "--password", "carol-secret")
    assert done.returncode == 0, done.stderr
    done = cli("users", *offline, "--list")
    assert done.stdout == "User:carol SCRAM-SHA-256(iterations=4096) SCRAM-SHA-512(iterations=4096)\n"
    bad = cli("users", "--override", "log.dirs=", "--list")
    assert bad.returncode == 1 and bad.stderr.startswith("triolog users: invalid configuration:"), bad.stderr
    process = InProcessBroker(data).start()
    try:
        done = cli("users", *offline, "--delete", "--user", "carol")
        assert done.returncode == 1
        assert done.stderr == (f"triolog users: the broker is running on {data} (its lock is held): stop it first, "
                               "or change users online with --bootstrap-server\n")
    finally:
        process.stop()
    assert cli("users", *offline, "--delete", "--user", "carol").returncode == 0
    assert cli("users", *offline, "--list").stdout == ""
