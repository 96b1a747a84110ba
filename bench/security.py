#!/usr/bin/env python
"""What TLS and SASL cost: the same produce and consume over PLAINTEXT, SSL and SASL_SSL listeners
of the Kafka protocol, in one run, as ratios to PLAINTEXT.

    .venv/bin/python bench/security.py            # 1M records of 100 B, 200k of 1 KiB, acks=1
    .venv/bin/python bench/security.py --quick    # a tenth of that

One broker process per security protocol (its Kafka listener named so; certificates made by
trustme at the start), the client kcat (librdkafka in C: the broker's cost, not a Python
client's). On PLAINTEXT a fetch is sendfile from the page cache to the socket; on SSL and
SASL_SSL it is read from the segment and encrypted in user space (the ssl module's SSLObject:
no kernel TLS), which is the difference the consume column shows. SASL costs one exchange per
connection, nothing per record: SASL_SSL logs in with PLAIN because Debian's kcat (librdkafka
2.0) repeats the client nonce in SCRAM's client-final message, which triolog refuses as Kafka 4
does (librdkafka 2.6.1 fixed it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.kafka_clients import kcat_consume, kcat_produce  # noqa: E402
from tests.e2e.broker_process import BrokerProcess  # noqa: E402
from tests.security.tls_certs import make_tls_files  # noqa: E402

MB = 1_000_000
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def client_settings(protocol: str, ca: Path) -> dict[str, str]:
    """kcat's librdkafka properties for a listener of ``protocol``."""
    settings = {"security.protocol": protocol}
    if "SSL" in protocol:
        settings["ssl.ca.location"] = str(ca)
    if protocol.startswith("SASL"):
        settings.update({"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-secret"})
    return settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the counts")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        print("kcat is not installed (Debian's package kcat; `make test` installs it)", file=sys.stderr)
        return 2
    scale = 10 if args.quick else 1
    plans = [(100, 1_000_000 // scale), (1024, 200_000 // scale)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="triolog-security-bench-") as tmp:
        tls = make_tls_files(Path(tmp) / "tls")
        for protocol in PROTOCOLS:
            data = Path(tmp) / protocol / "data"
            subprocess.run([sys.executable, "-m", "triolog.broker.cli", "users", "--add", "--user", "bench",
                            "--password", "bench-secret", "--override", f"log.dirs={data}"], cwd=ROOT, check=True,
                           capture_output=True)
            broker = BrokerProcess(data, ("log.segment.bytes=1073741824", f"ssl.keystore.location={tls.keystore}",
                                          "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512"),
                                   kafka=True, kafka_security=protocol).start(timeout_s=120)
            bootstrap, settings = f"127.0.0.1:{broker.kafka_port}", client_settings(protocol, tls.ca_pem)
            try:
                for size, count in plans:
                    lines = Path(tmp) / f"lines-{size}"
                    if not lines.exists():
                        lines.write_bytes((b"x" * (size - 1) + b"\n") * count)
                    topic = f"bench-{size}"
                    produced = kcat_produce(bootstrap, topic, lines, count, "1", settings)
                    consumed = kcat_consume(bootstrap, topic, count, settings)
                    rows.append((protocol, size, count / produced, count / consumed))
                print(f"{protocol}: done", file=sys.stderr, flush=True)
            finally:
                broker.kill()
    base = {size: (p, c) for protocol, size, p, c in rows if protocol == "PLAINTEXT"}
    print(f"{'listener':<15} {'value':>6} {'produce rec/s':>14} {'MB/s':>7} {'consume rec/s':>14} {'MB/s':>7}"
          f" {'vs PLAINTEXT (p/c)':>19}")
    for protocol, size, p, c in rows:
        print(f"{protocol:<15} {size:>5}B {p:>14,.0f} {p * size / MB:>7.1f} {c:>14,.0f} {c * size / MB:>7.1f}"
              f" {p / base[size][0]:>9.2f}/{c / base[size][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
