#!/usr/bin/env python3
"""Puts this machine's memory in the state hours of builds, tests and benches leave it in, or
back to a fresh one, so that a bench can be run on an aged host on purpose and compared with
a fresh one in the same session.

    python3 bench/age_memory.py age [--cache-gib 10] [--anon-gib 8] [--dir /var/tmp/graphloom-age]
    python3 bench/age_memory.py fresh      # drop the page cache, compact memory (root)
    python3 bench/age_memory.py state      # print the state only

`age` writes `--cache-gib` GiB of files, drops them from the cache, then touches `--anon-gib`
GiB of private memory a 4 KiB page at a time, reading one page of the files (no readahead)
after each, so that page-cache pages land between its own, and exits: what it frees comes
back as single pages between cached ones, and no 2 MiB block of that memory is free until the
kernel reclaims or compacts the cache (as after hours of work: the page cache full, free
memory in small blocks). The files stay, so the
cache stays filled; `fresh` drops the cache and compacts memory, and removes the files.

Each command prints one JSON object: the memory state after it (`MemFree`, `Cached`,
`AnonHugePages` in bytes, free blocks of 2 MiB and more from /proc/buddyinfo, and the
unusable-free-space index for 2 MiB: the share of free memory in blocks smaller than 2 MiB,
0 when every free page could back a huge page, near 1 when none could).
"""

import argparse
import json
import mmap
import os
import shutil
import sys

PAGE = 4096
HUGE_ORDER = 9  # 2 MiB in 4 KiB pages


def meminfo():
    """Fields of /proc/meminfo in bytes."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            parts = value.split()
            fields[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def buddy():
    """Free pages in blocks of each order, summed over the zones of /proc/buddyinfo."""
    orders = []
    with open("/proc/buddyinfo") as f:
        for line in f:
            counts = [int(c) for c in line.split()[4:]]
            orders += [0] * (len(counts) - len(orders))
            for k, c in enumerate(counts):
                orders[k] += c
    return orders


def state():
    """The memory state as a JSON-able dict."""
    m = meminfo()
    orders = buddy()
    free_pages = sum(c << k for k, c in enumerate(orders))
    huge_pages = sum(c << k for k, c in enumerate(orders) if k >= HUGE_ORDER)
    return {
        "mem_free_bytes": m.get("MemFree"),
        "cached_bytes": m.get("Cached"),
        "anon_huge_pages_bytes": m.get("AnonHugePages"),
        "free_2mib_blocks": huge_pages >> HUGE_ORDER,
        "unusable_index_2mib": round(1 - huge_pages / free_pages, 4) if free_pages else None,
    }


def write_files(directory, gib):
    """`gib` GiB of files of 256 MiB in `directory` (kept from an earlier call)."""
    os.makedirs(directory, exist_ok=True)
    block = os.urandom(1 << 20)
    paths = []
    for i in range(max(1, int(gib * 4))):
        path = os.path.join(directory, f"cache-{i:04d}.bin")
        if not os.path.exists(path) or os.path.getsize(path) != 256 << 20:
            with open(path + ".tmp", "wb") as f:
                for _ in range(256):
                    f.write(block)
            os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


def age(directory, cache_gib, anon_gib):
    """Interleaves page-cache pages with this process's own, then exits (see the module)."""
    paths = write_files(directory, cache_gib)
    # Written pages are cached already; drop them so that reading back interleaves.
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    size = int(anon_gib * (1 << 30)) // PAGE * PAGE
    anon = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        anon.madvise(mmap.MADV_NOHUGEPAGE)
    fds = []
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        # No readahead: each read below caches the one page it reads.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        fds.append(fd)
    file_pages = sum(os.path.getsize(p) for p in paths) // PAGE
    for i, page in enumerate(range(0, size, PAGE)):
        anon[page] = 1
        if i < file_pages:
            fd = fds[i * PAGE // (256 << 20)]
            os.pread(fd, PAGE, (i * PAGE) % (256 << 20))
        if page % (1 << 30) == 0:
            print(f"aging: {page >> 30} of {size >> 30} GiB touched", file=sys.stderr)
    for fd in fds:
        os.close(fd)
    anon.close()


def fresh(directory):
    """Removes the files, drops the page cache and compacts memory (root only)."""
    shutil.rmtree(directory, ignore_errors=True)
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        with open("/proc/sys/vm/compact_memory", "w") as f:
            f.write("1\n")
    except PermissionError:
        sys.exit("fresh: dropping the page cache and compacting memory need root")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["age", "fresh", "state"])
    parser.add_argument("--cache-gib", type=float, default=10.0)
    parser.add_argument("--anon-gib", type=float, default=8.0)
    parser.add_argument("--dir", default="/var/tmp/graphloom-age")
    a = parser.parse_args()
    if a.command == "age":
        age(a.dir, a.cache_gib, a.anon_gib)
    elif a.command == "fresh":
        fresh(a.dir)
    print(json.dumps({"command": a.command, **state()}))


if __name__ == "__main__":
    main()
