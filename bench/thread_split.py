#!/usr/bin/env python3
"""Where a broker's CPU went between two readings of bench/procs.sh's
thread_ticks_of (lines "PID/TID NAME TICKS"): per kind of thread — the
supervisor's own thread, the broker shards (threads named
broker-shard-N), the workers (every thread of the other processes),
other supervisor threads (admin, cluster) — in seconds and in µs per
message the subscribers received (their megaconn client JSON summary).

Usage: thread_split.py BEFORE AFTER CLK_TCK SUB.json
"""
import json
import sys


def read(path):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                out[parts[0]] = (parts[1], int(parts[2]))
    return out


def main():
    before, after, tck, sub_path = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(sub_path) as f:
        received = json.load(f)["summary"]["push"]["received"]
    root = min(int(k.split("/")[0]) for k in after) if after else 0
    kinds = {}
    for key, (name, ticks) in after.items():
        pid, tid = (int(x) for x in key.split("/"))
        if pid != root:
            kind = "workers"
        elif name.startswith("broker-shard"):
            kind = "shards"
        elif tid == pid:
            kind = "supervisor"
        else:
            kind = "other supervisor threads"
        kinds[kind] = kinds.get(kind, 0) + ticks - before.get(key, (name, 0))[1]
    if len({k.split("/")[0] for k in after}) == 1:
        kinds = {"the one process": sum(kinds.values())}
    line = "  split: " + "  ".join(
        "%s %.1f s (%.1f us/msg)" % (k, v / tck, v / tck * 1e6 / max(1, received)) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
    )
    print(line)


if __name__ == "__main__":
    main()
