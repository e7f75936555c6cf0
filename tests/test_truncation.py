"""Unit tests of tool-output truncation and its store (no gRPC)."""
from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from contextsvc.truncation import (
    ID_LENGTH, CleanupReport, CleanupScheduler, InvalidOutputId, LocalDiskStore, OutputNotFound,
    ReadResult, StoreUnavailable, TruncationSettings, build_hint, output_id_created_ms, read_lines,
    truncate_output,
)
from contextsvc.errors import DeadlineExceeded
from contextsvc.deadline import Deadline
from contextsvc.truncation import ids, local_store

SERVER_DIR = str(Path(__file__).resolve().parents[1] / "server")
DAY = 24 * 3600


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_store(tmp_path: Path, clock=time.time, **overrides) -> LocalDiskStore:
    settings = TruncationSettings(directory=str(tmp_path / "out"), **overrides)
    return LocalDiskStore(settings.directory, settings, clock=clock)


def output_files(directory: str | Path) -> list[str]:
    """Names in the directory that are valid output ids."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if ids.ID_RE.fullmatch(n))


HINTS = TruncationSettings()


def trunc(text, store, *, max_lines=2000, max_bytes=51200, direction="head", has_task_tool=False):
    return truncate_output(
        text,
        max_lines=max_lines,
        max_bytes=max_bytes,
        direction=direction,
        hint=HINTS.hint_for(has_task_tool),
        store=store,
    )


def preview_of(result, direction="head") -> str:
    """The preview part of a truncated result's content."""
    hint = build_hint(result.output_id, HINTS.hint)
    task_hint = build_hint(result.output_id, HINTS.hint_with_task_tool)
    content = result.content
    if direction == "head":
        head, _, _ = content.rpartition("\n\n...")
        return head
    for h in (hint, task_hint):
        if h in content:
            return content.split(h + "\n\n", 1)[1]
    raise AssertionError("hint not found")


# ---- limits at the edges ------------------------------------------------------------------


def test_exactly_max_lines_is_untouched(tmp_path):
    store = make_store(tmp_path)
    for text in ("\n".join(f"l{i}" for i in range(2000)), "".join(f"l{i}\n" for i in range(2000))):
        r = trunc(text, store)
        assert r.content == text
        assert (r.truncated, r.output_id, r.removed_lines, r.removed_bytes, r.cut_by) == (
            False, "", 0, 0, "")
    assert output_files(store.directory) == []
    assert store.usage() == (0, 0)


def test_one_line_over_is_truncated_by_lines(tmp_path):
    store = make_store(tmp_path)
    lines = [f"l{i}" for i in range(2001)]
    text = "\n".join(lines)
    r = trunc(text, store)
    assert r.truncated and r.cut_by == "lines" and r.removed_lines == 1
    assert "\n\n...1 lines truncated...\n\n" in r.content
    assert r.content.startswith("\n".join(lines[:2000]) + "\n\n...1 lines truncated...")
    assert r.removed_bytes == len(text.encode()) - len("\n".join(lines[:2000]).encode())
    assert store.get(r.output_id) == text


def test_exact_byte_limit_untouched_and_one_byte_over_cut(tmp_path):
    store = make_store(tmp_path)
    text = ("a" * 99 + "\n") * 512  # 51200 bytes, 512 lines
    assert len(text.encode()) == 51200
    assert trunc(text, store).truncated is False
    over = text + "b"
    r = trunc(over, store)
    assert r.truncated and r.cut_by == "bytes"
    # 512 whole lines cost 51200 bytes; the 513th ("b") would exceed: keep 512.
    assert preview_of(r) == text[:-1]
    assert r.removed_lines == 1
    assert f"...{r.removed_bytes} bytes truncated..." in r.content


def test_single_60kb_line_keeps_a_prefix_with_bytes_marker(tmp_path):
    store = make_store(tmp_path)
    text = "x" * 60_000
    r = trunc(text, store)
    assert r.truncated and r.cut_by == "bytes"
    prev = preview_of(r)
    assert prev == "x" * 51199  # charged like a line: its bytes + 1 <= max_bytes
    assert r.removed_bytes == 60_000 - 51199 and r.removed_lines == 1
    assert r.content.startswith(prev + "\n\n...8801 bytes truncated...\n\n")
    assert store.get(r.output_id) == text


@pytest.mark.parametrize("ch", ["汉", "😀", "é", "字😀a"])
@pytest.mark.parametrize("direction", ["head", "tail"])
@pytest.mark.parametrize("max_bytes", [100, 101, 102, 103, 51200])
def test_multibyte_characters_are_never_split(tmp_path, ch, direction, max_bytes):
    store = make_store(tmp_path)
    text = ch * (max_bytes // len(ch) + 10)  # one line, longer than max_bytes
    r = trunc(text, store, max_bytes=max_bytes, direction=direction)
    assert r.truncated and r.cut_by == "bytes"
    prev = preview_of(r, direction)
    kept = prev.encode("utf-8")  # would raise on a split character (lone surrogate)
    assert 0 < len(kept) <= max_bytes - 1
    assert len(kept) > max_bytes - 1 - 4  # no more than one character's worth dropped
    assert text.startswith(prev) if direction == "head" else text.endswith(prev)
    assert r.removed_bytes == len(text.encode()) - len(kept)


def test_multibyte_lines_are_kept_whole(tmp_path):
    store = make_store(tmp_path)
    lines = ["汉字😀" * 50] * 200  # 551 bytes per line with newline
    text = "\n".join(lines)
    r = trunc(text, store, max_bytes=5000)
    prev = preview_of(r)
    assert prev == "\n".join(lines[: 5000 // 551])
    assert len(prev.encode()) <= 5000
    r = trunc(text, store, max_bytes=5000, direction="tail")
    assert preview_of(r, "tail") == "\n".join(lines[-(5000 // 551):])


# ---- layout -------------------------------------------------------------------------------


def test_head_and_tail_layout(tmp_path):
    store = make_store(tmp_path)
    lines = [f"line {i}" for i in range(10)]
    text = "\n".join(lines) + "\n"
    r = trunc(text, store, max_lines=3, has_task_tool=False)
    assert r.content == (
        "line 0\nline 1\nline 2\n\n...7 lines truncated...\n\n" + build_hint(r.output_id, HINTS.hint)
    )
    r = trunc(text, store, max_lines=3, direction="tail", has_task_tool=True)
    assert r.content == (
        "...7 lines truncated...\n\n" + build_hint(r.output_id, HINTS.hint_with_task_tool) + "\n\nline 7\nline 8\nline 9"
    )
    assert (r.removed_lines, r.cut_by) == (7, "lines")
    assert store.get(r.output_id) == text


def test_hint_wording_names_the_agents_tools_not_an_rpc(tmp_path):
    """The defaults are the reference's two hints: the model is told to use its own tools
    (Grep, Read, Task), never ReadTruncated, an RPC it cannot call."""
    oid = "tool_0000000000000000000000000a"
    for has_task_tool in (False, True):
        hint = build_hint(oid, HINTS.hint_for(has_task_tool))
        first = hint.split("\n")[0]
        assert "succeeded" in first and "truncated" in first and oid in first
        assert "ReadTruncated" not in hint and "{output_id}" not in hint
        assert "Grep" in hint and "Read" in hint and "offset/limit" in hint
    task = build_hint(oid, HINTS.hint_with_task_tool)
    assert "Task tool" in task and "explore agent" in task and "Do NOT read the full output yourself" in task
    assert "Task" not in build_hint(oid, HINTS.hint)


def test_hints_are_set_in_config_and_must_place_the_id(tmp_path):
    settings = TruncationSettings.from_mapping({
        "directory": str(tmp_path), "hint": "Cut. Call fetch_output(id=\"{output_id}\", start, count) for more.",
        "hint_with_task_tool": "Cut ({output_id}): ask the scout agent."})
    r = trunc_with(settings, make_store(tmp_path), False)
    assert r.content.endswith(f'Cut. Call fetch_output(id="{r.output_id}", start, count) for more.')
    assert trunc_with(settings, make_store(tmp_path), True).content.endswith(": ask the scout agent.")
    for key in ("hint", "hint_with_task_tool"):
        with pytest.raises(ValueError, match=key):
            TruncationSettings.from_mapping({key: "Output cut: read it with fetch_output."})
    with pytest.raises(ValueError, match="output_id"):
        truncate_output("a\nb\n", max_lines=1, max_bytes=100, hint="no id", store=make_store(tmp_path))


def trunc_with(settings, store, has_task_tool):
    return truncate_output("a\nb\nc\n", max_lines=1, max_bytes=100, hint=settings.hint_for(has_task_tool),
                           store=store)


def test_bad_arguments(tmp_path):
    store = make_store(tmp_path)
    for kw in ({"max_lines": 0}, {"max_bytes": -1}, {"max_lines": True}, {"direction": "middle"}):
        with pytest.raises(ValueError):
            trunc("a\nb", store, **kw)
    with pytest.raises(ValueError):
        trunc("\ud800" * 100_000, store)  # lone surrogate: not encodable


def test_a_caller_past_its_deadline_or_gone_stores_nothing(tmp_path):
    store = make_store(tmp_path)
    text = "line\n" * 5000  # over max_lines: would be stored
    for deadline in (Deadline(time.monotonic() - 1), Deadline(None, cancelled=lambda: True)):
        with pytest.raises(DeadlineExceeded, match="before storing the output"):
            truncate_output(text, max_lines=100, max_bytes=51200, hint=HINTS.hint, store=store,
                            deadline=deadline)
    assert store.list_ids() == []
    result = truncate_output(text, max_lines=100, max_bytes=51200, hint=HINTS.hint, store=store,
                             deadline=Deadline.after(60))
    assert store.list_ids() == [result.output_id]


def test_a_caller_gone_while_its_output_is_stored_has_it_deleted_and_a_failed_delete_is_only_logged(
        tmp_path, caplog):
    store = make_store(tmp_path)
    text = "line\n" * 5000
    gone = threading.Event()
    store_put = store.put

    def put_while_the_caller_leaves(*args):
        output_id = store_put(*args)
        gone.set()
        return output_id

    store.put = put_while_the_caller_leaves
    deadline = Deadline(None, cancelled=gone.is_set)
    with pytest.raises(DeadlineExceeded, match="storing the output .deleted again.: the caller cancelled"):
        truncate_output(text, max_lines=100, max_bytes=51200, hint=HINTS.hint, store=store, deadline=deadline)
    assert store.list_ids() == [] and store.usage() == (0, 0)

    def refused(output_id, tenant=""):
        raise StoreUnavailable("the disk went read-only")

    gone.clear()
    store.delete = refused
    with pytest.raises(DeadlineExceeded):  # the caller's end, not the store's error
        truncate_output(text, max_lines=100, max_bytes=51200, hint=HINTS.hint, store=store, deadline=deadline)
    assert len(store.list_ids()) == 1  # left to retention and eviction
    assert "stored for a caller that left, failed" in caplog.text


def reference_truncate(text: str, max_lines: int, max_bytes: int, direction: str):
    """A slow per-line model of the rules, to check the bytes-level implementation."""
    body = text[:-1] if text.endswith("\n") else text
    lines = body.split("\n") if text else []
    if len(lines) <= max_lines and len(text.encode()) <= max_bytes:
        return None
    seq = lines if direction == "head" else lines[::-1]
    kept, used, cut = [], 0, "bytes"
    for line in seq:
        if len(kept) == max_lines:
            cut = "lines"
            break
        cost = len(line.encode()) + 1
        if used + cost > max_bytes:
            break
        kept.append(line)
        used += cost
    if direction == "tail":
        kept.reverse()
    preview = "\n".join(kept)
    if not kept:
        raw = seq[0].encode()
        part = raw[: max_bytes - 1] if direction == "head" else raw[len(raw) - (max_bytes - 1):]
        preview = part.decode("utf-8", "ignore")
    return preview, len(lines) - len(kept), cut


def test_matches_per_line_reference_on_random_texts(tmp_path):
    store = make_store(tmp_path, max_store_bytes=0)
    rng = random.Random(7)
    alphabet = ["a", "b", " ", "é", "汉", "😀", "\n", "\n", "\r"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        if rng.random() < 0.3:
            text = "\n".join(["z" * rng.randint(0, 40)] * rng.randint(0, 30))
        max_lines = rng.randint(1, 12)
        max_bytes = rng.randint(1, 120)
        direction = rng.choice(["head", "tail"])
        expected = reference_truncate(text, max_lines, max_bytes, direction)
        r = trunc(text, store, max_lines=max_lines, max_bytes=max_bytes, direction=direction)
        if expected is None:
            assert not r.truncated and r.content == text
            continue
        preview, removed_lines, cut = expected
        assert r.truncated and r.cut_by == cut
        assert (r.removed_lines, r.removed_bytes) == (
            removed_lines, len(text.encode()) - len(preview.encode()))
        marker = f"...{removed_lines if cut == 'lines' else r.removed_bytes} {cut} truncated..."
        hint = build_hint(r.output_id, HINTS.hint)
        if direction == "head":
            assert r.content == f"{preview}\n\n{marker}\n\n{hint}"
        else:
            assert r.content == f"{marker}\n\n{hint}\n\n{preview}"
        assert store.get(r.output_id) == text


# ---- store and read-back ------------------------------------------------------------------


def test_read_back_equals_original(tmp_path):
    store = make_store(tmp_path)
    text = "".join(f"行 {i} 😀 \r\n" for i in range(5000)) + "no newline at end"
    r = trunc(text, store)
    assert store.get(r.output_id) == text
    assert (tmp_path / "out" / r.output_id).read_bytes() == text.encode()
    assert oct((tmp_path / "out" / r.output_id).stat().st_mode & 0o777) == "0o600"


def test_read_lines_ranges(tmp_path):
    store = make_store(tmp_path)
    oid = store.put("".join(f"l{i}\n" for i in range(10)))
    r = read_lines(store, oid, 0, 3)
    assert (r.text, r.total_lines, r.offset, r.lines, r.eof) == ("l0\nl1\nl2", 10, 0, 3, False)
    r = read_lines(store, oid, 7, 3)
    assert (r.text, r.lines, r.eof) == ("l7\nl8\nl9", 3, True)
    r = read_lines(store, oid, 8, 100)
    assert (r.text, r.lines, r.eof) == ("l8\nl9", 2, True)
    r = read_lines(store, oid, 10, 5)
    assert (r.text, r.total_lines, r.lines, r.eof) == ("", 10, 0, True)
    r = read_lines(store, oid, 99, 5)
    assert (r.text, r.lines, r.eof) == ("", 0, True)
    r = read_lines(store, oid, 2, 0, default_limit=4)  # 0 = default limit
    assert (r.text, r.lines) == ("l2\nl3\nl4\nl5", 4)
    for bad in ((-1, 1), (0, -1)):
        with pytest.raises(ValueError):
            read_lines(store, oid, *bad)

    no_trailing = store.put("a\n\nb")
    r = read_lines(store, no_trailing, 0, 10)
    assert (r.text, r.total_lines, r.eof) == ("a\n\nb", 3, True)
    blank = store.put("\n")  # one empty line
    assert read_lines(store, blank, 0, 10) == ReadResult("", 1, 0, 1, True)
    empty = store.put("")
    assert read_lines(store, empty, 0, 10) == ReadResult("", 0, 0, 0, True)
    with pytest.raises(OutputNotFound):
        read_lines(store, "tool_00000000000000000000000000", 0, 1)


def test_read_lines_match_truncation_counts(tmp_path):
    store = make_store(tmp_path)
    text = "".join(f"row {i}\n" for i in range(2500))
    r = trunc(text, store)
    rest = read_lines(store, r.output_id, 2000, 1000)
    assert rest.lines == r.removed_lines == 500 and rest.eof
    assert rest.text.split("\n")[0] == "row 2000"


def test_ids_encode_time_and_increase(tmp_path):
    clock = Clock()
    store = make_store(tmp_path, clock=clock)
    a = store.put("a")
    assert len(a) == ID_LENGTH and a.startswith("tool_")
    assert output_id_created_ms(a) == int(clock.t * 1000)
    b = store.put("b")
    clock.t -= 3600  # wall clock steps back: ids still increase
    c = store.put("c")
    assert a < b < c
    assert store.list_ids() == [a, b, c]
    assert [store.get(i) for i in (a, b, c)] == ["a", "b", "c"]


def test_expiry_from_id_with_injected_clock(tmp_path):
    clock = Clock()
    store = make_store(tmp_path, clock=clock)
    old = store.put("old")
    clock.t += 7 * DAY
    assert store.get(old) == "old"  # exactly at the retention: still there
    young = store.put("young")
    # File metadata does not matter: make the old file look brand new.
    os.utime(tmp_path / "out" / old, (time.time() + DAY, time.time() + DAY))
    clock.t += 1
    with pytest.raises(OutputNotFound):
        store.get(old)  # expired before any cleanup
    assert (tmp_path / "out" / old).exists()
    assert store.list_ids() == [young]
    report = store.cleanup()
    assert (report.expired, report.bytes_freed, report.remaining) == (1, 3, 1)
    assert not (tmp_path / "out" / old).exists()
    assert store.get(young) == "young"
    assert store.usage() == (1, 5)


def test_size_cap_evicts_oldest_first(tmp_path):
    evictions = []
    settings = TruncationSettings(directory=str(tmp_path / "out"), max_store_bytes=3000)
    store = LocalDiskStore(settings.directory, settings, on_evict=lambda n, b: evictions.append((n, b)))
    ids = [store.put(str(i) * 1000) for i in range(5)]
    assert output_files(store.directory) == ids[2:]
    assert evictions == [(1, 1000), (1, 1000)]
    assert store.usage() == (3, 3000)
    for oid in ids[:2]:
        with pytest.raises(OutputNotFound):
            store.get(oid)
    assert store.get(ids[4]) == "4" * 1000

    # An output larger than the cap evicts everything older but is itself kept.
    big = store.put("x" * 5000)
    assert output_files(store.directory) == [big] and store.get(big) == "x" * 5000

    # Cleanup enforces the cap too (e.g. after the cap was lowered).
    s2 = TruncationSettings(directory=settings.directory, max_store_bytes=2500)
    # a second later: ids from another store instance in the same millisecond would not sort
    # after big's (each instance numbers its own ids within a millisecond)
    store2 = LocalDiskStore(settings.directory, s2, clock=lambda: time.time() + 1.0,
                            on_evict=lambda n, b: evictions.append((n, b)))
    ids2 = [store2.put("y" * 1000) for _ in range(2)]
    assert output_files(store.directory) == ids2
    small = LocalDiskStore(settings.directory, TruncationSettings(
        directory=settings.directory, max_store_bytes=1500), on_evict=lambda n, b: evictions.append((n, b)))
    report = small.cleanup()
    assert (report.evicted, report.evicted_bytes, report.remaining) == (1, 1000, 1)
    assert output_files(store.directory) == ids2[1:]
    assert evictions[-1] == (1, 1000)


def test_unlimited_store_when_cap_is_zero(tmp_path):
    store = make_store(tmp_path, max_store_bytes=0)
    ids = [store.put("z" * 10_000) for _ in range(20)]
    assert output_files(store.directory) == ids
    assert store.cleanup().evicted == 0


def test_concurrent_writers_get_unique_readable_ids(tmp_path):
    store = make_store(tmp_path)
    results: dict[int, list[tuple[str, str]]] = {}
    barrier = threading.Barrier(8)

    def writer(n):
        barrier.wait()
        mine = []
        for i in range(40):
            text = f"writer {n} item {i}\n" * (i + 1)
            mine.append((store.put(text), text))
        results[n] = mine

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pairs = [p for n in range(8) for p in results[n]]
    ids = [oid for oid, _ in pairs]
    assert len(set(ids)) == len(ids) == 320
    for n in range(8):  # each writer saw strictly increasing ids
        mine = [oid for oid, _ in results[n]]
        assert mine == sorted(mine)
    for oid, text in pairs:
        assert store.get(oid) == text
    assert sorted(ids) == output_files(store.directory)
    assert store.usage() == (320, sum(len(t.encode()) for _, t in pairs))


# ---- failures -----------------------------------------------------------------------------


def no_leftovers(directory) -> bool:
    return os.listdir(directory) == []


def test_failed_rename_leaves_no_file(tmp_path, monkeypatch):
    store = make_store(tmp_path)

    def boom(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(local_store.os, "replace", boom)
    with pytest.raises(StoreUnavailable):
        store.put("x" * 100_000)
    assert no_leftovers(store.directory)
    assert store.usage() == (0, 0)


def test_disk_full_midway_through_write_leaves_no_file(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        if calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        calls.append(1)
        return real_write(fd, bytes(data[: len(data) // 2]))

    monkeypatch.setattr(local_store.os, "write", half_then_full)
    with pytest.raises(StoreUnavailable, match="no space left"):
        trunc("line\n" * 50_000, store)
    assert no_leftovers(store.directory)


def test_fsync_failure_is_unavailable(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    monkeypatch.setattr(local_store.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(StoreUnavailable):
        store.put("data")
    assert no_leftovers(store.directory)


def test_open_enospc_is_unavailable(tmp_path, monkeypatch):
    store = make_store(tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local_store.os, "open", full)
    with pytest.raises(StoreUnavailable, match="no space left on device"):
        store.put("data")
    monkeypatch.undo()
    assert no_leftovers(store.directory)
    assert store.get(store.put("fine")) == "fine"  # recovers once the disk has room


def test_directory_under_a_regular_file_is_unavailable(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("file")
    settings = TruncationSettings(directory=str(blocker / "out"))
    store = LocalDiskStore(settings.directory, settings)  # construction does not fail
    with pytest.raises(StoreUnavailable, match="cannot store tool output"):
        store.put("data")
    with pytest.raises(StoreUnavailable):
        trunc("x\n" * 3000, store)
    assert blocker.read_text() == "file"


def test_directory_recreated_if_removed(tmp_path):
    store = make_store(tmp_path)
    store.put("a")
    for name in os.listdir(store.directory):
        os.unlink(os.path.join(store.directory, name))
    os.rmdir(store.directory)
    assert store.get(store.put("b")) == "b"


KILL_CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from contextsvc.truncation import LocalDiskStore, TruncationSettings
    from contextsvc.truncation import local_store
    real_write = os.write
    def slow_write(fd, data):
        # Write 1 MiB at a time, slowly, so the parent can kill us in the middle.
        n = real_write(fd, bytes(data[: 1 << 20]))
        time.sleep(0.02)
        return n
    local_store.os.write = slow_write
    s = TruncationSettings(directory=sys.argv[2])
    store = LocalDiskStore(s.directory, s)
    print("ready", flush=True)
    store.put("0123456789abcdef\\n" * (64 << 20 >> 4))  # 64 MiB
    print("done", flush=True)
    """
)


def test_sigkill_during_write_leaves_no_file_under_a_valid_id(tmp_path):
    directory = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_CHILD, SERVER_DIR, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        temp = None
        while time.monotonic() < deadline:
            temps = [n for n in os.listdir(directory) if n.startswith(".tmp-")]
            if temps and os.path.getsize(directory / temps[0]) >= 2 << 20:
                temp = temps[0]
                break
            time.sleep(0.005)
        assert temp is not None, "child never started writing"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert output_files(directory) == []  # nothing under a valid id
    assert 0 < os.path.getsize(directory / temp) < 64 << 20  # it really was killed midway

    store = LocalDiskStore(str(directory), TruncationSettings(directory=str(directory)))
    assert store.usage() == (0, 0)
    assert store.cleanup().temp_removed == 0  # within the grace period: maybe a live writer
    report = store.cleanup(now=time.time() + 3600)
    assert report.temp_removed == 1
    assert os.listdir(directory) == []


def test_cleanup_keeps_temp_files_of_writes_in_progress(tmp_path, monkeypatch):
    clock = Clock()
    store = make_store(tmp_path, clock=clock)
    started, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd):
        started.set()
        release.wait(5)
        real_fsync(fd)

    monkeypatch.setattr(local_store.os, "fsync", slow_fsync)
    out = []
    t = threading.Thread(target=lambda: out.append(store.put("in flight")))
    t.start()
    assert started.wait(5)
    report = store.cleanup(now=clock.t + 3600)  # beyond the grace, but the write is live
    assert report.temp_removed == 0
    release.set()
    t.join(5)
    assert store.get(out[0]) == "in flight"
    foreign = tmp_path / "out" / "notes.txt"  # files the store did not create stay
    foreign.write_text("keep")
    store.cleanup(now=clock.t + 8 * DAY)
    assert foreign.read_text() == "keep"


# ---- ids from clients ---------------------------------------------------------------------

BAD_IDS = [
    "",
    "../secret",
    "tool_../../../secret",
    "tool_0000000000000000000000000/",
    "/etc/passwd",
    str(Path("/tmp/tool_00000000000000000000000000")),
    "tool_0000000000000000000000000\x00",
    "tool_0000000000000000000000000g",
    "tool_000000000000000000000000AB",
    "TOOL_00000000000000000000000000",
    "tol_000000000000000000000000000",
    "file_00000000000000000000000000",
    "tool_00000000000000000000000000\n",
    "tool_0000000000000000000000000",
    "tool_00000000000000000000000000" + "0" * 1000,
    "tool_0000000000000000000000000０",  # fullwidth digit
    ".tmp-tool_00000000000000000000000000.00000000",
    None,
    123,
    b"tool_00000000000000000000000000",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_malformed_ids_are_rejected_without_file_access(tmp_path, monkeypatch, bad):
    store = make_store(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("do not read")
    touched = []
    monkeypatch.setattr(local_store, "open", lambda *a, **k: touched.append(a) or open(*a, **k),
                        raising=False)
    real_unlink = os.unlink
    monkeypatch.setattr(local_store.os, "unlink", lambda p, *a, **k: touched.append(p) or real_unlink(p, *a, **k))
    for call in (store.get, store.delete, lambda i: read_lines(store, i, 0, 10)):
        with pytest.raises(InvalidOutputId):
            call(bad)
    assert touched == []
    assert secret.read_text() == "do not read"


def test_valid_but_unknown_id_is_not_found(tmp_path):
    store = make_store(tmp_path)
    unknown = "tool_" + format(int(time.time() * 1000), "012x") + "0" * 14
    with pytest.raises(OutputNotFound):
        store.get(unknown)
    assert store.delete(unknown) is False
    oid = store.put("x")
    assert store.delete(oid) is True
    with pytest.raises(OutputNotFound):
        store.get(oid)
    assert store.usage() == (0, 0)


# ---- scheduler ----------------------------------------------------------------------------


class CountingStore:
    def __init__(self, fail_first: int = 0):
        self.calls = []
        self.fail_first = fail_first

    def cleanup(self, now=None):
        self.calls.append(now)
        if len(self.calls) <= self.fail_first:
            raise RuntimeError("disk on fire")
        return CleanupReport()


def test_scheduler_runs_repeatedly_survives_errors_and_stops_promptly(tmp_path):
    settings = TruncationSettings(
        directory=str(tmp_path), cleanup_interval_seconds=0.02, cleanup_first_delay_seconds=0.01)
    fake = CountingStore(fail_first=2)
    sched = CleanupScheduler(fake, settings, clock=lambda: 42.0)
    sched.start()
    deadline = time.monotonic() + 5
    while len(fake.calls) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    sched.stop()
    assert time.monotonic() - t0 < 1
    assert not sched.running
    assert len(fake.calls) >= 5 and set(fake.calls) == {42.0}
    assert sched.failures == 2 and sched.last_report == CleanupReport()
    n = len(fake.calls)
    time.sleep(0.1)
    assert len(fake.calls) == n  # really stopped


def test_scheduler_first_delay_and_prompt_stop_during_long_wait(tmp_path):
    settings = TruncationSettings(
        directory=str(tmp_path), cleanup_interval_seconds=3600, cleanup_first_delay_seconds=3600)
    fake = CountingStore()
    sched = CleanupScheduler(fake, settings)
    sched.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    sched.stop()
    assert time.monotonic() - t0 < 1 and fake.calls == []


def test_scheduler_cleans_a_real_store(tmp_path):
    clock = Clock()
    store = make_store(tmp_path, clock=clock)
    oid = store.put("soon gone")
    clock.t += 8 * DAY
    settings = TruncationSettings(
        directory=store.directory, cleanup_interval_seconds=0.02, cleanup_first_delay_seconds=0)
    sched = CleanupScheduler(store, settings, clock=clock)
    sched.start()
    deadline = time.monotonic() + 5
    while output_files(store.directory) and time.monotonic() < deadline:
        time.sleep(0.01)
    sched.stop()
    assert output_files(store.directory) == []
    assert sched.runs >= 1 and not (Path(store.directory) / oid).exists()


# ---- settings -----------------------------------------------------------------------------


def test_settings_defaults(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/x")
    s = TruncationSettings()
    assert (s.max_lines, s.max_bytes, s.read_default_limit) == (2000, 51200, 2000)
    assert (s.retention_seconds, s.cleanup_interval_seconds, s.cleanup_first_delay_seconds) == (
        7 * DAY, 3600, 60)
    assert s.max_store_bytes == 1 << 30
    assert s.directory == "/var/cache/x/contextsvc/tool-output"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert TruncationSettings().directory == os.path.expanduser("~/.cache/contextsvc/tool-output")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the XDG spec: ignored
    assert TruncationSettings().directory == os.path.expanduser("~/.cache/contextsvc/tool-output")


def test_settings_from_mapping():
    s = TruncationSettings.from_mapping(
        {"max_lines": 10, "max_bytes": 100, "retention_seconds": 1.5, "max_store_bytes": 0,
         "directory": "~/x"})
    assert (s.max_lines, s.max_bytes, s.retention_seconds, s.max_store_bytes) == (10, 100, 1.5, 0)
    assert s.directory == os.path.expanduser("~/x")
    assert s.cleanup_interval_seconds == 3600  # untouched default
    with pytest.raises(Exception):
        s.max_lines = 5  # frozen


@pytest.mark.parametrize(
    "table, key",
    [
        ({"max_line": 10}, "max_line"),
        ({"max_lines": "10"}, "max_lines"),
        ({"max_lines": 0}, "max_lines"),
        ({"max_lines": True}, "max_lines"),
        ({"max_lines": 10.0}, "max_lines"),
        ({"max_bytes": -5}, "max_bytes"),
        ({"retention_seconds": 0}, "retention_seconds"),
        ({"retention_seconds": float("inf")}, "retention_seconds"),
        ({"cleanup_interval_seconds": 0}, "cleanup_interval_seconds"),
        ({"cleanup_first_delay_seconds": -1}, "cleanup_first_delay_seconds"),
        ({"max_store_bytes": -1}, "max_store_bytes"),
        ({"read_default_limit": 0}, "read_default_limit"),
        ({"directory": ""}, "directory"),
        ({"directory": 5}, "directory"),
    ],
)
def test_settings_from_mapping_rejects(table, key):
    with pytest.raises(ValueError, match=repr(key)):
        TruncationSettings.from_mapping(table)


# ---- scale --------------------------------------------------------------------------------


def test_large_output_is_exact(tmp_path):
    store = make_store(tmp_path)
    text = "".join(f"2024-01-01T00:00:00Z worker-{i % 7} request {i} ok\n" for i in range(400_000))
    r = trunc(text, store, direction="tail")
    assert r.cut_by == "bytes" and r.truncated
    prev = preview_of(r, "tail")
    assert text.endswith(prev + "\n") and len(prev.encode()) <= 51200
    assert r.removed_lines == 400_000 - (prev.count("\n") + 1)
    assert store.get(r.output_id) == text
