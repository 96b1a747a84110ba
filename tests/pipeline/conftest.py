"""Fixtures: one real local Spark (session-scoped: the JVM takes ~10 s to start) and one real
broker process, shared by every test in this package; each test uses its own topics."""

from __future__ import annotations

import itertools
import os
import re
import sys

import pytest

from tests.e2e.broker_process import ROOT, InProcessBroker

_names = itertools.count()

#: log4j2 at ERROR: Spark's INFO/WARN chatter would bury pytest's output.
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """local[2], UI off, loopback only, this interpreter for the workers, a lean test JVM."""
    from pyspark.sql import SparkSession

    conf_dir = tmp_path_factory.mktemp("spark-conf")
    log4j = conf_dir / "log4j2.properties"
    log4j.write_text(_LOG4J)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Workers import pipeline/ and client/ from the checkout, and PySpark looks for the
    # top-level pyspark_triolog module on the workers' path.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    java_options = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.configurationFile=file:{log4j}"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("triolog-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> InProcessBroker:
    # The retention task runs at once and often, so segments below a delete_records offset really
    # go; no time limit, since the tests write records with timestamps years in the past.
    process = InProcessBroker(tmp_path_factory.mktemp("pipeline-broker") / "data",
                            ("log.retention.check.interval.ms=200", "log.initial.task.delay.ms=0",
                             "log.retention.ms=-1")).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port}"


@pytest.fixture
def topic(request) -> str:
    """A topic name unique to this test (created by the test as it needs it)."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:120]
    return f"{base}-{next(_names)}"


@pytest.fixture
def admin(bootstrap):
    from triolog.client import AdminClient

    with AdminClient(bootstrap) as client:
        yield client
