"""What the broker's log says, read from a real broker's JSON log: routine connection events only
at DEBUG, each event once, and a first start told apart from a crash."""

from __future__ import annotations

import signal

from triolog.client import AdminClient, Consumer, NewTopic, Producer
from tests.e2e.broker_process import BrokerProcess
from tests.waiting import wait_for

STORAGE_LOGGER = "triolog.broker.storage.log_manager"


def _exercise(broker: BrokerProcess, topic: str) -> int:
    """Create, alter, produce to, consume from and delete ``topic``: four client connections."""
    bootstrap = f"127.0.0.1:{broker.port}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
        admin.alter_configs({topic: {"retention.ms": "3600000"}})
    with Producer(bootstrap) as producer:
        producer.send(topic, b"one").get(10)
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        consumer.subscribe([topic])
        wait_for(lambda: consumer.poll(200), 10, "the record consumed")
    finally:
        consumer.close()
    with AdminClient(bootstrap) as admin:
        admin.delete_topics([topic])
    return 4


def _connection_events(broker: BrokerProcess) -> list[dict]:
    return [e for e in broker.events() if e.get("event") in ("connection_opened", "connection_closed")]


def test_connection_events_are_debug_only_and_each_topic_change_is_logged_once(tmp_path):
    broker = BrokerProcess(tmp_path / "info").start()
    try:
        _exercise(broker, "logged-once")
        assert broker.stop() == 0
    finally:
        broker.kill()
    assert _connection_events(broker) == []  # INFO, the default: routine connections say nothing
    mentions = [e for e in broker.events() if "logged-once" in str(e)]
    # One line per thing that happened: the partition's log created, the topic created, its
    # config altered, the topic deleted (no second line for any of them from another layer).
    assert [e["event"].split(" ")[0] for e in mentions] == [
        "created", "topic_created", "topic_configs_altered", "topic_deleted"], [e["event"] for e in mentions]
    assert mentions[0]["logger"] == STORAGE_LOGGER and mentions[0]["event"].startswith("created log logged-once-0 ")


def test_at_debug_each_connection_is_opened_and_closed_once(tmp_path):
    broker = BrokerProcess(tmp_path / "debug", ("logger.level=DEBUG",)).start()
    try:
        connections = _exercise(broker, "debugged")

        def all_closed():
            events = _connection_events(broker)
            return len([e for e in events if e["event"] == "connection_closed"]) >= connections and events

        events = wait_for(all_closed, 10, "every connection closed")
    finally:
        broker.kill()
    assert {e["level"] for e in events} == {"debug"}
    opened = [e["peer"] for e in events if e["event"] == "connection_opened"]
    closed = [e["peer"] for e in events if e["event"] == "connection_closed"]
    assert len(opened) >= connections
    assert sorted(opened) == sorted(closed) and len(set(opened)) == len(opened)  # once each


def _storage_start_events(broker: BrokerProcess) -> list[dict]:
    return [e for e in broker.events() if e.get("logger") == STORAGE_LOGGER
            and ("shutdown" in e["event"] or "first start" in e["event"])]


def test_a_first_start_is_not_an_unclean_shutdown_and_a_crash_is(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        broker.start()
        with AdminClient(f"127.0.0.1:{broker.port}") as admin:
            admin.create_topics([NewTopic("crashed", 1)])  # a log to recover later
        assert broker.stop(signal.SIGTERM) == 0
        broker.start()
        broker.kill()
        broker.start()
    finally:
        broker.kill()
    first, clean, crashed = _storage_start_events(broker)
    assert first["level"] == "info" and first["event"] == f"log directory {data.resolve()} is new: first start, nothing to recover"
    assert clean["level"] == "info" and clean["event"] == f"loaded 1 logs from {data.resolve()} after a clean shutdown"
    assert crashed["level"] == "warning"
    assert crashed["event"].startswith(f"loaded 1 logs from {data.resolve()} after an unclean shutdown")
    assert not any("unclean" in e["event"] for e in (first, clean))


def test_log_manager_tells_a_new_log_dir_from_a_used_one_without_its_marker(tmp_path, caplog):
    from triolog.broker.storage.checkpoints import CLEAN_SHUTDOWN_FILE
    from triolog.broker.storage.log_manager import LogManager
    from triolog.config.log_config import LogConfig

    caplog.set_level("INFO", logger=STORAGE_LOGGER)

    def start() -> tuple[LogManager, list]:
        caplog.clear()
        manager = LogManager([tmp_path / "new", tmp_path / "used"], LogConfig())
        manager.startup()
        return manager, [(r.levelname, r.getMessage()) for r in caplog.records
                         if "shutdown" in r.getMessage() or "first start" in r.getMessage()]

    manager, records = start()
    assert manager.new_log_dirs == {(tmp_path / "new").resolve(), (tmp_path / "used").resolve()}
    assert [level for level, _ in records] == ["INFO", "INFO"]
    assert all("is new: first start" in message for _, message in records)
    log = manager.get_or_create_log("t", 0)
    used = log.directory.parent.resolve()
    other = ({(tmp_path / "new").resolve(), (tmp_path / "used").resolve()} - {used}).pop()
    manager.shutdown()
    for d in manager.log_dirs:
        d.unlock()

    (used / CLEAN_SHUTDOWN_FILE).unlink()  # as after a crash
    manager, records = start()
    assert manager.new_log_dirs == set()
    assert manager.had_clean_shutdown == {other: True, used: False}
    assert sorted(records) == sorted([
        ("INFO", f"loaded 0 logs from {other} after a clean shutdown"),
        ("WARNING", f"loaded 1 logs from {used} after an unclean shutdown (no {CLEAN_SHUTDOWN_FILE}): "
                    "recovered them from their recovery points"),
    ])
    manager.shutdown()
