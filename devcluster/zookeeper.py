"""A real ZooKeeper ensemble on loopback: Debian's ZooKeeper 3.8 jars (libzookeeper-java, which
`make system-deps` installs) run by hand with a Java 17+ runtime, one process per node, no
service and no Docker. `make cluster` (:mod:`triolog.devcluster`) runs one under three brokers;
the cluster tests (tests/cluster) run theirs on free ports.

Ticks are short (ZOOKEEPER_TICK_MS) so that a test can ask for a session timeout of a few
seconds (ZooKeeper bounds it to 2..20 ticks) and see a dead broker's session expire quickly.
Nodes can be killed, stopped (SIGSTOP) and restarted, as the fault tests need.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ZOOKEEPER_JARS = Path("/usr/share/java")
#: The jars QuorumPeerMain loads (Debian's names, unversioned links): ZooKeeper, its wire format,
#: Netty (the server's networking), SLF4J with its simple binding (to the node's log file), and
#: what the server's startup reads (commons-cli/io, metrics, snappy).
CLASSPATH_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "metrics-core.jar",
    "snappy-java.jar",
)
ZOOKEEPER_TICK_MS = 250
#: JVM flags for a small, quickly started node.
JVM_FLAGS = ("-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


def zookeeper_classpath() -> str:
    missing = [jar for jar in CLASSPATH_JARS if not (ZOOKEEPER_JARS / jar).exists()]
    if missing:
        raise RuntimeError(
            f"ZooKeeper's jars are missing from {ZOOKEEPER_JARS}: {', '.join(missing)} "
            f"(Debian's libzookeeper-java; `make test` installs it)"
        )
    return ":".join(str(ZOOKEEPER_JARS / jar) for jar in CLASSPATH_JARS)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def four_letter_word(port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """ZooKeeper's admin command over its client port; '' if the node does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ZooKeeperNode:
    myid: int
    directory: Path
    client_port: int
    peer_port: int
    election_port: int
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def mode(self) -> str | None:
        """'leader', 'follower' or 'standalone' once serving; None otherwise."""
        for line in four_letter_word(self.client_port).splitlines():
            if line.startswith("Mode: "):
                return line.split(": ", 1)[1].strip()
        return None

    @property
    def log(self) -> str:
        path = self.directory / "zookeeper.log"
        return path.read_text(errors="replace") if path.exists() else ""


def set_parent_death_signal() -> None:
    """In a child between fork and exec (Linux): SIGTERM it when the process that started it dies,
    so that a supervisor killed -9 leaves no node or broker behind (prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


class ZooKeeperEnsemble:
    """``size`` ZooKeeper nodes (1: standalone) in ``directory``; ``connect(chroot)`` for brokers.

    ``client_ports``: each node's client port (default: free ports); the quorum's peer and
    election ports are always free ones. ``die_with_parent``: the nodes get SIGTERM when the
    process that started them dies (for a supervisor; a test's fixture stops them itself).
    """

    def __init__(
        self,
        directory: Path,
        size: int = 3,
        tick_ms: int = ZOOKEEPER_TICK_MS,
        *,
        client_ports: Sequence[int] | None = None,
        die_with_parent: bool = False,
    ):
        self.directory = Path(directory)
        self.tick_ms = tick_ms
        self.classpath = zookeeper_classpath()
        self._preexec: Callable[[], None] | None = set_parent_death_signal if die_with_parent else None
        if client_ports is not None and len(client_ports) != size:
            raise ValueError(f"{size} nodes need {size} client ports, not {len(client_ports)}")
        ports = free_ports(3 * size)
        if client_ports is not None:
            ports[0::3] = client_ports
        self.nodes = [
            ZooKeeperNode(i + 1, self.directory / f"zk{i + 1}", ports[3 * i], ports[3 * i + 1], ports[3 * i + 2])
            for i in range(size)
        ]
        for node in self.nodes:
            self._configure(node)

    def _configure(self, node: ZooKeeperNode) -> None:
        data = node.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={data}",
            f"clientPort={node.client_port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr,stat",
            "maxClientCnxns=0",
            # A node that comes back joins quickly, rather than after ZooKeeper's 5 s default.
            "cnxTimeout=1000",
        ]
        if len(self.nodes) > 1:
            (data / "myid").write_text(f"{node.myid}\n")
            lines += [f"server.{n.myid}=127.0.0.1:{n.peer_port}:{n.election_port}" for n in self.nodes]
        (node.directory / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def connect(self, chroot: str = "") -> str:
        """A ``zookeeper.connect`` value naming every node, with ``chroot`` (e.g. "/triolog")."""
        return ",".join(node.address for node in self.nodes) + chroot

    def start_node(self, node: ZooKeeperNode) -> None:
        assert node.process is None or node.process.poll() is not None, "already running"
        with open(node.directory / "zookeeper.log", "ab") as log:
            node.process = subprocess.Popen(
                [
                    "java",
                    *JVM_FLAGS,
                    "-Dzookeeper.admin.enableServer=false",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-Dorg.slf4j.simpleLogger.logFile=System.err",
                    "-cp",
                    self.classpath,
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(node.directory / "zoo.cfg"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=self._preexec,
            )

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        for node in self.nodes:
            self.start_node(node)
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float = 60.0, nodes: list[ZooKeeperNode] | None = None) -> None:
        """Until every node (of ``nodes``) answers as part of a quorum."""
        waiting = list(nodes if nodes is not None else [n for n in self.nodes if self.running(n)])
        deadline = time.monotonic() + timeout
        while waiting:
            for node in list(waiting):
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(f"ZooKeeper node {node.myid} exited:\n{node.log[-3000:]}")
                if node.mode() is not None:
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(
                    f"ZooKeeper nodes {[n.myid for n in waiting]} not serving after {timeout} s:\n"
                    + "\n".join(n.log[-2000:] for n in waiting)
                )
            if waiting:
                time.sleep(0.05)

    @staticmethod
    def running(node: ZooKeeperNode) -> bool:
        return node.process is not None and node.process.poll() is None

    def leader(self) -> ZooKeeperNode | None:
        return next((n for n in self.nodes if self.running(n) and n.mode() in ("leader", "standalone")), None)

    def kill(self, node: ZooKeeperNode) -> None:
        if self.running(node):
            assert node.process is not None
            node.process.kill()
            node.process.wait()

    def pause(self, node: ZooKeeperNode) -> None:
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)

    def resume(self, node: ZooKeeperNode) -> None:
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGCONT)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM every node (ZooKeeper's orderly shutdown), then SIGKILL those still running."""
        for node in self.nodes:
            if self.running(node):
                assert node.process is not None
                os.kill(node.process.pid, signal.SIGCONT)
                node.process.terminate()
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        self.stop()

    def stop(self) -> None:
        """SIGKILL every node (a paused one too) and reap them."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                try:
                    os.kill(node.process.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                node.process.kill()
        for node in self.nodes:
            if node.process is not None:
                node.process.wait()
