"""Benchmark of tool-output truncation, storing included.

    PYTHONPATH=server python bench/bench_truncate.py [--repeats N]

1. Truncating one generated 20 MB log (head and tail), store on a temp dir: p50 over repeats.
2. 1,000 truncations of distinct 100 KB outputs: truncations per second, median over repeats;
   sequential, and from 4 threads as a gRPC thread pool would call it. Each of these stores
   its output with fsync of the file and of the directory, so the disk's fsync latency bounds
   the sequential rate; the same batch with a store that drops the text shows the algorithm alone, and a
   bare write+fsync+rename+fsync loop shows the disk's own ceiling.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from contextsvc.truncation import LocalDiskStore, Store, TruncationSettings, truncate_output

TARGET_PER_SECOND = 1000


class DiscardStore(Store):
    """Hands out ids and drops the text: the cost of the algorithm alone, without I/O."""

    def __init__(self) -> None:
        self._n = 0

    def put(self, text, deadline=None, tenant=""):
        self._n += 1
        return f"tool_{self._n:026x}"

    def get_bytes(self, output_id, deadline=None, tenant=""):
        raise NotImplementedError

    def delete(self, output_id, tenant=""):
        return False

    def list_ids(self):
        return []

    def cleanup(self, now=None):
        raise NotImplementedError

    def usage(self):
        return self._n, 0


def make_log(size: int, seed: int = 0) -> str:
    parts, n, i = [], 0, seed
    while n < size:
        line = (
            f"2025-01-02T03:04:{i % 60:02d}.{i % 1000:03d}Z INFO worker-{i % 16} "
            f"GET /api/v1/items/{i * 7919 % 100000} status=200 bytes={i % 4096} "
            f"latency_ms={i % 250} trace=0x{i * 2654435761 % (1 << 32):08x}\n"
        )
        parts.append(line)
        n += len(line)
        i += 1
    return "".join(parts)


def settle() -> None:
    """Flush writeback and discards of earlier repeats before timing the next one."""
    os.sync()
    time.sleep(0.2)


def fresh_store(root: str, name: str) -> LocalDiskStore:
    directory = os.path.join(root, name)
    settings = TruncationSettings(directory=directory, max_store_bytes=0)
    return LocalDiskStore(directory, settings)


def truncate(text: str, store: Store, direction: str = "head"):
    return truncate_output(
        text, max_lines=2000, max_bytes=51200, direction=direction,
        hint=TruncationSettings().hint_with_task_tool, store=store
    )


def bench_big(root: str, repeats: int) -> None:
    text = make_log(20 * 1024 * 1024)
    size_mb = len(text.encode()) / 1e6
    for direction in ("head", "tail"):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            truncate(text, DiscardStore(), direction)
            times.append(time.perf_counter() - t0)
        print(
            f"20 MB log ({size_mb:.1f} MB), {direction}, algorithm only (no store I/O): "
            f"p50 {statistics.median(times) * 1e3:.1f} ms"
        )
        times = []
        for r in range(repeats):
            store = fresh_store(root, f"big-{direction}-{r}")
            settle()
            t0 = time.perf_counter()
            result = truncate(text, store, direction)
            times.append(time.perf_counter() - t0)
            assert result.truncated and store.get(result.output_id) == text
            shutil.rmtree(store.directory)
        print(
            f"20 MB log ({size_mb:.1f} MB, {text.count(chr(10))} lines), {direction}, stored: "
            f"p50 {statistics.median(times) * 1e3:.1f} ms "
            f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, n={repeats})"
        )


def bench_disk_ceiling(root: str, repeats: int, count: int = 300) -> None:
    """Bare write + fsync + rename + directory fsync of 100 KB files: the disk's own limit."""
    data = make_log(100 * 1024, seed=2).encode()
    rates, fsyncs = [], []
    for r in range(repeats):
        d = os.path.join(root, f"raw-{r}")
        os.makedirs(d)
        settle()
        t0 = time.perf_counter()
        for i in range(count):
            tmp, final = os.path.join(d, f".tmp{i}"), os.path.join(d, f"f{i}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, data)
            t1 = time.perf_counter()
            os.fsync(fd)
            fsyncs.append(time.perf_counter() - t1)
            os.close(fd)
            os.replace(tmp, final)
            dfd = os.open(d, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        rates.append(count / (time.perf_counter() - t0))
        shutil.rmtree(d)
    print(
        f"disk ceiling, bare durable 100 KB file writes (2 fsyncs each): median "
        f"{statistics.median(rates):,.0f}/s; file fsync p50 {statistics.median(fsyncs) * 1e3:.2f} ms"
    )


def bench_many(root: str, repeats: int, count: int = 1000) -> None:
    base = make_log(100 * 1024, seed=1)
    # Distinct texts (a differing first line), built before timing.
    texts = [f"run {i}\n" + base for i in range(count)]
    size_kb = len(texts[0].encode()) / 1024

    def run(label: str, make_store, workers: int) -> None:
        rates = []
        for r in range(repeats):
            store = make_store(r)
            settle()
            t0 = time.perf_counter()
            if workers == 1:
                for t in texts:
                    truncate(t, store)
            else:
                with ThreadPoolExecutor(workers) as pool:
                    for _ in pool.map(lambda t: truncate(t, store), texts, chunksize=8):
                        pass
            rates.append(count / (time.perf_counter() - t0))
            if isinstance(store, LocalDiskStore):
                assert store.usage()[0] == count
                shutil.rmtree(store.directory)
        med = statistics.median(rates)
        verdict = "meets" if med >= TARGET_PER_SECOND else "below"
        print(
            f"{count} x {size_kb:.0f} KB truncations, {label}: median {med:,.0f}/s "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f}, n={repeats}) "
            f"[{verdict} target {TARGET_PER_SECOND:,}/s]"
        )

    run("disk store, sequential", lambda r: fresh_store(root, f"seq-{r}"), 1)
    run("disk store, 4 threads", lambda r: fresh_store(root, f"thr-{r}"), 4)
    run("no store I/O, sequential (algorithm only)", lambda r: DiscardStore(), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="repeats per measurement (median)")
    ap.add_argument("--dir", default=None, help="parent of the temp store dirs (default: $TMPDIR)")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeats={args.repeats}")
    root = tempfile.mkdtemp(prefix="bench-truncate-", dir=args.dir)
    try:
        bench_big(root, args.repeats)
        bench_many(root, max(3, args.repeats // 2))
        bench_disk_ceiling(root, max(3, args.repeats // 2))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
