"""Producer snapshot timings: write and load a ``.snapshot`` of N producer ids (default 100k).

Prints the median of several runs of: encoding, writing (tmp + fsync + rename), loading
(read + CRC + decode into entries, ProducerStateManager.load_from_snapshot), and a whole
Log.open of a partition whose clean-shutdown snapshot holds N producers (load_stats).

    python bench/producer_snapshot.py [--producers 100000] [--runs 5] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.broker.storage.clock import ManualClock  # noqa: E402
from triolog.broker.storage.log import Log  # noqa: E402
from triolog.broker.storage.producer_state import ProducerStateManager, encode_snapshot  # noqa: E402
from triolog.config.log_config import LogConfig  # noqa: E402
from triolog.protocol.records import Record, encode_batch  # noqa: E402

NOW = 1_700_000_000_000


def populate(manager: ProducerStateManager, producers: int) -> None:
    for pid in range(producers):
        manager.update(pid, 0, pid % 1000 + 4, pid * 5 + 4, 4, NOW)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        source = ProducerStateManager(root / "src", 86_400_000)
        (root / "src").mkdir()
        populate(source, args.producers)
        encode, write, load, opens = [], [], [], []
        size = 0
        for run in range(args.runs):
            started = time.perf_counter()
            data = encode_snapshot(source.producers.values())
            encode.append(time.perf_counter() - started)
            size = len(data)
            source.update_map_end_offset(args.producers * 5 * (run + 1))
            started = time.perf_counter()
            source.take_snapshot(sync=True)
            write.append(time.perf_counter() - started)
            reader = ProducerStateManager(root / "src", 86_400_000)
            started = time.perf_counter()
            reader.load_from_snapshot(0, NOW)
            load.append(time.perf_counter() - started)
            assert len(reader.producers) == args.producers
        # A whole partition: one batch in the log, its clean-shutdown snapshot holding every producer.
        for run in range(args.runs):
            directory = root / f"t-{run}"
            log = Log.open(directory, LogConfig(), clock=ManualClock(NOW))
            log.append_as_leader(encode_batch([Record(0, NOW, b"k", b"v")]))
            populate(log.producer_state_manager, args.producers)
            log.close()  # the snapshot at the log end, 1
            reopened = Log.open(directory, LogConfig(), clock=ManualClock(NOW), had_clean_shutdown=True)
            assert reopened.load_stats.producers_loaded == args.producers
            opens.append(reopened.load_stats.producer_state_load_ms / 1000)
            reopened.close()
        print(f"producers: {args.producers}, snapshot file: {size} bytes ({size / 1e6:.1f} MB), runs: {args.runs}")
        print(f"encode alone (median): {median_ms(encode):.1f} ms")
        print(f"take_snapshot: encode + write + fsync + rename (median): {median_ms(write):.1f} ms")
        print(f"load: read + CRC + decode (median): {median_ms(load):.1f} ms")
        print(f"Log.open producer state load (median, load_stats.producer_state_load_ms): {median_ms(opens):.1f} ms")


if __name__ == "__main__":
    main()
