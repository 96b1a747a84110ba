"""How the commands end, as real processes: a reader closing the pipe early (``| head``), Ctrl-C
(SIGINT), a terminal's progress line, and ``serve`` failing to start (busy port, locked or
unusable log dir, bad config): quietly, with the right exit code, never with a traceback."""

from __future__ import annotations

import os
import pty
import select
import shlex
import signal
import socket
import subprocess
import time

import pytest

from triolog.client import Producer
from triolog.client.admin import AdminClient

from tests.cli.conftest import cli_command, cli_env
from tests.e2e.broker_process import ROOT
from tests.waiting import wait_for


def _popen(*args: str, **kwargs) -> subprocess.Popen:
    # Ctrl-C at a terminal: SIGINT at its default disposition. A test run started in the
    # background by a non-interactive shell inherits it ignored (as `cmd &` sets it), and a
    # program started with SIGINT ignored rightly keeps ignoring it.
    return subprocess.Popen(cli_command(*args), cwd=ROOT, env=cli_env(),
                            preexec_fn=_default_sigint, **kwargs)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_consume_piped_into_head_exits_0_without_a_traceback(broker, server, topic, tmp_path):
    # More than a pipe buffer holds, so the consumer is still writing when head has gone.
    with Producer(f"127.0.0.1:{broker.port}", linger_ms=20) as producer:
        for i in range(3000):
            producer.send(topic, b"%04d" % i + b"x" * 100, partition=0)
    consume = shlex.join(cli_command("consume", *server, "--topic", topic, "--from-beginning",
                                     "--timeout-ms", "20000"))
    script = f'{consume} 2>{tmp_path}/err | head -1; echo "${{PIPESTATUS[0]}}" >{tmp_path}/status'
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=cli_env(), capture_output=True, timeout=60)
    assert done.stdout == b"0000" + b"x" * 100 + b"\n"
    assert (tmp_path / "status").read_text() == "0\n"
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception" not in err, err


def test_consume_counts_only_the_records_it_wrote(broker, server, topic):
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        for value in (b"one", b"two"):
            producer.send(topic, value, partition=0)
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader already gone: the first record cannot be written
    try:
        done = subprocess.run(cli_command("consume", *server, "--topic", topic, "--from-beginning",
                                          "--timeout-ms", "20000"),
                              stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT, env=cli_env(), timeout=60)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, b"Processed a total of 0 messages\n")


def test_dump_log_piped_into_head_exits_0_without_a_traceback(broker, topic, tmp_path):
    with Producer(f"127.0.0.1:{broker.port}", linger_ms=20) as producer:
        for i in range(3000):
            producer.send(topic, b"%04d" % i + b"x" * 100, partition=0)
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    dump = shlex.join(cli_command("dump-log", "--files", str(segment), "--print-data-log"))
    script = f'{dump} 2>{tmp_path}/err | head -1; echo "${{PIPESTATUS[0]}}" >{tmp_path}/status'
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=cli_env(), capture_output=True, timeout=60)
    assert done.stdout == f"Dumping {segment}\n".encode()
    assert (tmp_path / "status").read_text() == "0\n"
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception" not in err, err


def test_ctrl_c_ends_consume_with_130_and_no_traceback(broker, server, topic):
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        producer.send(topic, b"only", partition=0)
    process = _popen("consume", *server, "--topic", topic, "--from-beginning",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout.readline() == b"only\n"  # it is in its loop, waiting for more
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err.decode() == "Processed a total of 1 messages\n"


def test_ctrl_c_ends_produce_with_130_keeping_what_was_sent(broker, server, topic):
    with AdminClient(f"127.0.0.1:{broker.port}") as admin:
        admin.create_topics([(topic, 1, 1, {})])
    process = _popen("produce", *server, "--topic", topic, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        process.stdin.write(b"first\n")
        process.stdin.flush()
        with AdminClient(f"127.0.0.1:{broker.port}") as admin:
            wait_for(lambda: admin.list_offsets({(topic, 0): -1})[(topic, 0)].offset == 1, 20, "the record sent")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 130 and err == b""


def _read_all(fd: int, process: subprocess.Popen) -> bytes:
    # poll, not select: a worker that ran many tests holds more than select's 1024 descriptors
    chunks = []
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        if not poller.poll(20_000):
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_produce_shows_progress_on_a_terminal_for_a_long_input(broker, server, topic):
    with AdminClient(f"127.0.0.1:{broker.port}") as admin:
        admin.create_topics([(topic, 1, 1, {})])
    controller, terminal = pty.openpty()
    process = _popen("produce", *server, "--topic", topic, stdin=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    try:
        process.stdin.write(b"a\n" * 5)
        process.stdin.flush()
        with AdminClient(f"127.0.0.1:{broker.port}") as admin:
            wait_for(lambda: admin.list_offsets({(topic, 0): -1})[(topic, 0)].offset == 5, 20, "5 records sent")
        time.sleep(1.2)  # a slow input (more than the first second), not a wait for a result
        process.stdin.write(b"b\n" * 5)
        process.stdin.close()
        shown = _read_all(controller, process).decode()
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        os.close(controller)
    assert "\r6 records, " in shown and "\r10 records, " in shown and shown.endswith("records/s \r\n"), shown


def test_produce_shows_no_progress_when_stderr_is_not_a_terminal(triolog, server, topic):
    result = triolog("produce", *server, "--topic", topic, stdin=b"x\n" * 100)
    assert (result.code, result.stderr) == (0, "")


def _serve(tmp_path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = ["serve", "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", "metrics.listener=", "--override", "kafka.listeners="]
    for item in overrides:
        args += ["--override", item]
    return subprocess.run(cli_command(*args), cwd=ROOT, env={**cli_env(), **(env or {})}, capture_output=True,
                          text=True, timeout=60)


def _one_line_failure(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "Exception Group" not in done.stderr, done.stderr
    failures = [line for line in done.stderr.splitlines() if line.startswith("triolog: ")]
    assert len(failures) == 1 and done.stderr.splitlines()[-1] == failures[0], done.stderr
    return failures[0]


def test_serve_on_a_busy_port_names_it(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = _one_line_failure(_serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}"))
    assert line == f"triolog: cannot start: cannot listen on 127.0.0.1:{port} (listeners): Address already in use"


def test_serve_ignores_the_client_tools_bootstrap_variable_but_warns_of_a_typo(tmp_path):
    with socket.socket() as busy:  # serve logs its config warnings, then stops on the busy port
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = _serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}",
                      env={"TRIOLOG_BOOTSTRAP_SERVER": f"127.0.0.1:{port}", "TRIOLOG_NUM_PARTITION": "2"})
    _one_line_failure(done)
    logged = done.stdout + done.stderr
    assert "TRIOLOG_NUM_PARTITION matches no config key" in logged, logged
    assert "TRIOLOG_BOOTSTRAP_SERVER" not in logged, logged


def test_serve_on_a_log_dir_another_broker_holds_names_it(tmp_path, broker):
    line = _one_line_failure(_serve(tmp_path, f"log.dirs={broker.data_dir}"))
    assert line.startswith("triolog: cannot start: cannot open log.dirs=")
    assert f"log directory {broker.data_dir.resolve()} is in use by another process" in line


def test_serve_on_an_unusable_log_dir_names_it(tmp_path):
    (tmp_path / "a-file").write_text("")
    line = _one_line_failure(_serve(tmp_path, f"log.dirs={tmp_path / 'a-file' / 'data'}"))
    assert line == (f"triolog: cannot start: cannot open log.dirs={tmp_path / 'a-file' / 'data'}: "
                    f"Not a directory: {tmp_path / 'a-file' / 'data'}")


@pytest.mark.parametrize("override, says", [
    ("log.retention.ms=soon", "invalid value 'soon' for log.retention.ms (from --override): not an integer"),
    ("num.partitions=0", "invalid value '0' for num.partitions (from --override): must be at least 1"),
])
def test_serve_with_an_invalid_config_value_names_the_key(tmp_path, override, says):
    line = _one_line_failure(_serve(tmp_path, override))
    assert line.startswith("triolog: invalid configuration: ") and says in line
