#!/usr/bin/env python3
"""Times two builds of graphloom on the same benches, alternating runs (old, new, old, ...) so
that a shared, noisy machine weighs on both alike, and prints the median of each figure per
build with the ratio new / old.

usage: bench/compare_builds.py OLD_BINARY NEW_BINARY [--repeats N] -- BENCH ARGS [-- BENCH ARGS ...]
e.g.   bench/compare_builds.py /tmp/old/graphloom target/debug/graphloom -- \
           fullbatch --epochs 3 --threads 2 --baselines /nonexistent -- link --batches 40

Each bench runs with --json; only GraphLoom's lines count (a baseline's `system` is another).
A figure is a numeric key of a line, named by the line's text keys (model, method, dataset...).
"""
import json
import statistics
import subprocess
import sys

# Keys of a line that name what it measured, and numeric keys that are not figures of speed
# or memory (or that describe the host, which both builds share).
NAME_KEYS = ("bench", "model", "method", "dataset", "fanouts", "graph", "figure", "task")
SKIP_KEYS = {"host", "time_ratio_vs_graphloom", "memory_ratio_vs_graphloom", "repeat"}


def run(binary, args):
    out = subprocess.run([binary, "bench", *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{binary} bench {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    figures = {}
    for line in out.stdout.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("system", "graphloom") != "graphloom":
            continue
        name = " ".join([args[0]] + [str(row[k]) for k in NAME_KEYS if k in row])
        for key, value in row.items():
            if key in SKIP_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            figures[f"{name} {key}"] = value
    return figures


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or "--" not in argv:
        sys.exit(__doc__)
    old, new = argv[0], argv[1]
    repeats = 3
    rest = argv[2:]
    if rest[0] == "--repeats":
        repeats, rest = int(rest[1]), rest[2:]
    benches, current = [], None
    for a in rest:
        if a == "--":
            current = []
            benches.append(current)
        else:
            current.append(a)
    for args in benches:
        runs = {old: [], new: []}
        for r in range(repeats):
            for binary in (old, new):
                print(f"run {r + 1}/{repeats} {binary} bench {' '.join(args)}", file=sys.stderr, flush=True)
                runs[binary].append(run(binary, args))
        keys = sorted(set(runs[old][0]) & set(runs[new][0]))
        print(f"\n## bench {' '.join(args)} (median of {repeats}, alternating)\n")
        print("| figure | old | new | new / old |")
        print("|---|---|---|---|")
        for key in keys:
            o = statistics.median(f[key] for f in runs[old] if key in f)
            n = statistics.median(f[key] for f in runs[new] if key in f)
            ratio = n / o if o else float("nan")
            print(f"| {key} | {o:.4g} | {n:.4g} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
