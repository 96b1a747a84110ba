"""The data source over TLS and SASL: the ``triolog.security.protocol``, ``triolog.sasl.*`` and
``triolog.ssl.*`` options reach every connection (planning on the driver, reads and writes on the
workers), against a real SASL_SSL broker."""

from __future__ import annotations

import pytest

from tests.e2e.broker_process import BrokerProcess
from tests.security.brokers import add_user
from tests.security.tls_certs import make_tls_files
from triolog.client import AdminClient, NewTopic, Producer
from triolog.pipeline.options import OptionError, parse_read_options, parse_write_options


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("pipeline-tls"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, tls):
    data = tmp_path_factory.mktemp("pipeline-sasl-ssl") / "data"
    add_user(data, "spark", "spark-secret")
    process = BrokerProcess(data, security="SASL_SSL", overrides=(f"ssl.keystore.location={tls.keystore}",)).start()
    yield process
    process.stop()


def _security_options(tls) -> dict[str, str]:
    return {"triolog.security.protocol": "SASL_SSL", "triolog.sasl.mechanism": "SCRAM-SHA-512",
            "triolog.sasl.username": "spark", "triolog.sasl.password": "spark-secret",
            "triolog.ssl.cafile": str(tls.ca_pem)}


def test_security_options_are_parsed_and_checked(tls):
    options = {"triolog.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", **_security_options(tls)}
    parsed = parse_read_options(options, streaming=False)
    assert (parsed.security.security_protocol, parsed.security.sasl_mechanism, parsed.security.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "spark")
    assert parsed.client == {}
    assert parse_write_options({"triolog.bootstrap.servers": "127.0.0.1:1", **_security_options(tls)}
                               ).security == parsed.security
    jaas = {"triolog.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
            "triolog.security.protocol": "SASL_PLAINTEXT",
            "triolog.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="u" password="p";'}
    assert parse_read_options(jaas).security.sasl_username == "u"
    with pytest.raises(OptionError, match="triolog.security.protocol.*sasl_username and sasl_password"):
        parse_read_options({"triolog.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                            "triolog.security.protocol": "SASL_SSL"})
    with pytest.raises(OptionError, match="no such file"):
        parse_write_options({"triolog.bootstrap.servers": "127.0.0.1:1", "triolog.security.protocol": "SSL",
                             "triolog.ssl.cafile": "/nonexistent/ca.pem"})


def test_spark_reads_and_writes_through_sasl_ssl(spark, secure_broker, tls):
    bootstrap = f"127.0.0.1:{secure_broker.port}"
    settings = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="spark",
                    sasl_password="spark-secret", ssl_cafile=str(tls.ca_pem))
    with AdminClient(bootstrap, **settings) as admin:
        admin.create_topics([NewTopic("secure-in", 2), NewTopic("secure-out", 1)])
    with Producer(bootstrap, **settings) as producer:
        for i in range(50):
            producer.send("secure-in", b"v%d" % i, key=b"k%d" % i)
    reader = spark.read.format("triolog").option("triolog.bootstrap.servers", bootstrap).option("subscribe", "secure-in")
    for name, value in _security_options(tls).items():
        reader = reader.option(name, value)
    df = reader.load()
    rows = df.collect()
    assert sorted(row["value"] for row in rows) == sorted(b"v%d" % i for i in range(50))
    writer = df.select("key", "value").write.format("triolog").mode("append").option(
        "triolog.bootstrap.servers", bootstrap).option("topic", "secure-out")
    for name, value in _security_options(tls).items():
        writer = writer.option(name, value)
    writer.save()
    with AdminClient(bootstrap, **settings) as admin:
        assert admin.list_offsets({("secure-out", 0): -1})[("secure-out", 0)].offset == 50
