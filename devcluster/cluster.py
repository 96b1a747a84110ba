"""``python -m triolog.devcluster``: ZooKeeper and three brokers on one machine, until Ctrl-C.

Everything lives under one directory (``--dir``, default ``./cluster-data``, which git ignores):

    cluster-data/zookeeper/zk1..zk3/   each node's zoo.cfg, data and zookeeper.log
    cluster-data/broker-1..3/          each broker's server.properties, data/ and broker.log

A second run reuses them (same ports, same cluster id, the logs as they were left); delete the
directory to start from nothing. Each broker is ``triolog serve --config
cluster-data/broker-N/server.properties`` (what `make run` runs, with a file of its own), in a
session of its own, so that Ctrl-C reaches this supervisor only: it stops the brokers first
(SIGTERM: each deregisters and flushes), then ZooKeeper. A broker that dies meanwhile (a
``kill -9`` of a leader, to watch failover) is reported with the command that restarts it; the
rest keep running. Children get SIGTERM if this process is itself killed (Linux).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .zookeeper import ZooKeeperEnsemble, free_ports as free_local_ports, set_parent_death_signal

#: The ZooKeeper path the cluster's znodes go under.
CHROOT = "/triolog"
#: ZooKeeper's tick: sessions may last 2..20 ticks, so a broker's 6 s session fits (and a killed
#: leader is replaced about 6 s after its kill -9).
TICK_MS = 500
SESSION_TIMEOUT_MS = 6000
#: How long a broker may take to shut down after SIGTERM before it is killed.
STOP_TIMEOUT_S = 30.0


class ClusterError(Exception):
    """The cluster cannot start (a port taken, Java or ZooKeeper's jars missing, a broker failed)."""


@dataclass
class Broker:
    broker_id: int
    directory: Path
    port: int
    kafka_port: int
    metrics_port: int
    process: subprocess.Popen | None = field(default=None, repr=False)
    #: Its exit was reported already.
    reported: bool = False

    @property
    def config_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    def properties(self, zookeeper_connect: str) -> str:
        lines = [
            "# Written by `make cluster` (python -m triolog.devcluster) at every start: edits are lost.",
            f"broker.id={self.broker_id}",
            f"zookeeper.connect={zookeeper_connect}",
            f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            f"log.dirs={self.directory.resolve() / 'data'}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"kafka.listeners=PLAINTEXT://127.0.0.1:{self.kafka_port}",
            f"metrics.listener=http://127.0.0.1:{self.metrics_port}",
            # Kafka's advice for three brokers: three copies, acks=all needs two of them.
            "default.replication.factor=3",
            "min.insync.replicas=2",
            # A restarted broker gets its preferred leaderships back within half a minute (Kafka: 300 s).
            "leader.imbalance.check.interval.seconds=30",
        ]
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "triolog.broker.cli", "serve", "--config", str(self.config_file)]

    def restart_hint(self) -> str:
        """The command a user pastes to start this broker again (the `triolog` of this install)."""
        script = Path(sys.executable).parent / "triolog"
        program = [_relative(script)] if script.exists() else [sys.executable, "-m", "triolog.broker.cli"]
        return shlex.join([*program, "serve", "--config", _relative(self.config_file)])

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def registered_brokers(port: int, timeout_s: float = 3.0) -> list[int]:
    """The broker ids a broker's Metadata lists (msgpack listener on ``port``); [] if it does not answer."""
    from triolog.client.connection import SyncConnection
    from triolog.protocol import messages as m

    try:
        connection = SyncConnection(f"127.0.0.1:{port}", connect_timeout_s=timeout_s)
    except Exception:
        return []
    try:
        doc = connection.call(m.MetadataRequest(id=0, topics=()), timeout_s)
    except Exception:
        return []
    finally:
        connection.close()
    return sorted(b["node_id"] for b in (doc or {}).get("brokers", ()))


class _Stop(Exception):
    """SIGINT or SIGTERM arrived."""


def _raise_stop(signum, frame) -> None:
    raise _Stop(signal.Signals(signum).name)


class DevCluster:
    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        *,
        port: int = 9092,
        kafka_port: int = 19092,
        metrics_port: int = 9404,
        zookeeper_port: int = 2181,
        free_ports: bool = False,
    ):
        self.directory = Path(directory)
        if free_ports:
            ports = free_local_ports(3 * brokers + 3)
            zk_ports, ports = ports[:3], ports[3:]
            listeners = [(ports[i * 3], ports[i * 3 + 1], ports[i * 3 + 2]) for i in range(brokers)]
        else:
            zk_ports = [zookeeper_port + i for i in range(3)]
            listeners = [(port + i, kafka_port + i, metrics_port + i) for i in range(brokers)]
            taken = [p for p in [*zk_ports, *(p for ports in listeners for p in ports)] if _taken(p)]
            if taken:
                raise ClusterError(
                    f"port(s) {', '.join(map(str, taken))} of 127.0.0.1 are in use (`make run`? another "
                    "`make cluster`?): stop what holds them, or choose others (--port, --kafka-port, "
                    "--metrics-port, --zookeeper-port, or --free-ports)"
                )
        self.zookeeper_ports = zk_ports
        self.brokers = [
            Broker(i + 1, self.directory / f"broker-{i + 1}", msgpack, kafka, metrics)
            for i, (msgpack, kafka, metrics) in enumerate(listeners)
        ]
        self.zookeeper: ZooKeeperEnsemble | None = None

    @property
    def zookeeper_connect(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.zookeeper_ports) + CHROOT

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def kafka_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers)

    # -- starting ---------------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> None:
        """ZooKeeper, then the brokers; returns once every broker lists every other."""
        deadline = time.monotonic() + timeout_s
        try:
            self.zookeeper = ZooKeeperEnsemble(
                self.directory / "zookeeper", 3, TICK_MS, client_ports=self.zookeeper_ports, die_with_parent=True
            )
        except RuntimeError as exc:  # the jars are missing
            raise ClusterError(f"{exc}; `make system-deps` installs them") from None
        try:
            self.zookeeper.start(timeout=max(1.0, deadline - time.monotonic()))
        except FileNotFoundError:
            raise ClusterError("no `java` on PATH: ZooKeeper needs a Java 17+ runtime (`make system-deps`)") from None
        except (RuntimeError, TimeoutError) as exc:
            raise ClusterError(f"ZooKeeper did not start: {exc}") from None
        for broker in self.brokers:
            self._start_broker(broker)
        wanted = [b.broker_id for b in self.brokers]
        while True:
            for broker in self.brokers:
                if not broker.running():
                    raise ClusterError(
                        f"broker {broker.broker_id} exited with {broker.process.returncode if broker.process else '?'}"
                        f" ({_relative(broker.log_file)}):\n{broker.log_tail()}"
                    )
            if all(registered_brokers(b.port) == wanted for b in self.brokers):
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the brokers did not all see each other within {timeout_s:.0f} s; their logs: "
                    + ", ".join(_relative(b.log_file) for b in self.brokers)
                )
            time.sleep(0.25)

    def _start_broker(self, broker: Broker) -> None:
        (broker.directory / "data").mkdir(parents=True, exist_ok=True)
        broker.config_file.write_text(broker.properties(self.zookeeper_connect))
        with open(broker.log_file, "ab") as log:
            broker.process = subprocess.Popen(
                broker.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the supervisor only: it stops them in order
                preexec_fn=set_parent_death_signal,
            )
        broker.reported = False

    # -- running and stopping ---------------------------------------------------------------------

    def summary(self) -> str:
        assert self.zookeeper is not None
        lines = [
            f"triolog cluster: {len(self.brokers)} brokers, ZooKeeper {self.zookeeper_connect}",
            f"  bootstrap (triolog CLI, msgpack):  {self.bootstrap()}",
            f"  bootstrap (Kafka clients):         {self.kafka_bootstrap()}",
            "  metrics:                           "
            + " ".join(f"http://127.0.0.1:{b.metrics_port}/metrics" for b in self.brokers),
        ]
        for broker in self.brokers:
            assert broker.process is not None
            lines.append(
                f"  broker {broker.broker_id}: pid {broker.process.pid}, msgpack {broker.port}, "
                f"Kafka {broker.kafka_port}, log {_relative(broker.log_file)}"
            )
        for node in self.zookeeper.nodes:
            assert node.process is not None
            lines.append(f"  zookeeper {node.myid}: pid {node.process.pid}, {node.address}")
        lines.append(
            f"Try: triolog topics --describe --bootstrap-server {self.bootstrap()}   (Ctrl-C here stops the cluster)"
        )
        return "\n".join(lines)

    def watch(self, poll_s: float = 0.5) -> None:
        """Report brokers and ZooKeeper nodes that exit, until interrupted."""
        assert self.zookeeper is not None
        gone_nodes: set[int] = set()
        while True:
            for broker in self.brokers:
                if broker.process is not None and broker.process.poll() is not None and not broker.reported:
                    broker.reported = True
                    print(
                        f"broker {broker.broker_id} (pid {broker.process.pid}) exited with "
                        f"{_exit_text(broker.process.returncode)}; start it again with:\n"
                        f"  {broker.restart_hint()}",
                        flush=True,
                    )
            for node in self.zookeeper.nodes:
                if node.myid not in gone_nodes and not self.zookeeper.running(node):
                    gone_nodes.add(node.myid)
                    print(f"zookeeper {node.myid} exited ({_relative(node.directory / 'zookeeper.log')})", flush=True)
            time.sleep(poll_s)

    def stop(self) -> None:
        """SIGTERM the brokers (they deregister while ZooKeeper still runs), SIGKILL those still
        running after STOP_TIMEOUT_S, then ZooKeeper."""
        running = [b for b in self.brokers if b.running()]
        for broker in running:
            assert broker.process is not None
            broker.process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for broker in running:
            assert broker.process is not None
            try:
                broker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"broker {broker.broker_id} did not stop within {STOP_TIMEOUT_S:.0f} s: killed", flush=True)
                broker.process.kill()
                broker.process.wait()
        if self.zookeeper is not None:
            self.zookeeper.terminate()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m triolog.devcluster",
        description="Run a triolog cluster on this machine: a 3-node ZooKeeper ensemble (Debian's "
        "libzookeeper-java and Java 17+: `make system-deps`) and broker processes on 127.0.0.1, until "
        "Ctrl-C or SIGTERM. Broker N listens on PORT+N-1 (msgpack), KAFKA_PORT+N-1 and METRICS_PORT+N-1; "
        "ZooKeeper node N on ZOOKEEPER_PORT+N-1.",
    )
    parser.add_argument(
        "--dir", default="cluster-data", help="where the data, configs and logs go (default: %(default)s)"
    )
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (default: %(default)s)")
    parser.add_argument("--port", type=int, default=9092, help="broker 1's msgpack port (default: %(default)s)")
    parser.add_argument("--kafka-port", type=int, default=19092, help="broker 1's Kafka port (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9404, help="broker 1's metrics port (default: %(default)s)")
    parser.add_argument(
        "--zookeeper-port", type=int, default=2181, help="ZooKeeper node 1's client port (default: %(default)s)"
    )
    parser.add_argument("--free-ports", action="store_true", help="any free ports instead of the ones above")
    parser.add_argument(
        "--timeout", type=float, default=90.0, help="seconds to wait for the cluster to form (default: %(default)s)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.brokers < 1:
        print("--brokers must be at least 1", file=sys.stderr)
        return 2
    # Raised from here on as _Stop, so that Ctrl-C during startup stops what started too.
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster: DevCluster | None = None
    code = 0
    try:
        cluster = DevCluster(
            Path(args.dir),
            args.brokers,
            port=args.port,
            kafka_port=args.kafka_port,
            metrics_port=args.metrics_port,
            zookeeper_port=args.zookeeper_port,
            free_ports=args.free_ports,
        )
        print(f"starting ZooKeeper and {args.brokers} brokers in {args.dir}/ ...", flush=True)
        cluster.start(args.timeout)
        print(cluster.summary(), flush=True)
        cluster.watch()
    except _Stop as stop:
        print(f"{stop}: stopping the cluster", flush=True)
    except ClusterError as exc:
        print(f"triolog devcluster: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the orderly stop short
            signal.signal(sig, signal.SIG_IGN)
        if cluster is not None:
            cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code == 0:
        print("cluster stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
