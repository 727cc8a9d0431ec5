#!/usr/bin/env python3
"""Summary of an MMP round trace (VFP_MMP_TRACE=file on a GPU encode with synchronized
tiles): each plane's rounds split into search (the GPU round and its round trip), coding
and the dictionary update, by eighths of the plane, and how many planes were searching or
in their host part at once.

    VFP_MMP_TRACE=trace.txt vfpipe run -i clip.y4m -f mmp=lambda=25:tile=256x256 --device cuda -o null
    python3 scripts/mmp-round-trace.py trace.txt [--all]
"""
import argparse
import collections
import signal
import statistics


def planes(path):
    """The planes' rounds, in start order: lists of (round, blocks, start, searched, coded, learnt)."""
    by_key = collections.defaultdict(list)
    for line in open(path):
        p = line.split()
        if len(p) == 7:
            by_key[p[0]].append(tuple(int(x) for x in p[1:]))
    seqs = []
    for rounds in by_key.values():  # a key (the plane's tile array) is reused by later planes
        rounds.sort(key=lambda r: r[2])
        cur = []
        for r in rounds:
            if cur and r[0] <= cur[-1][0]:
                seqs.append(cur)
                cur = []
            cur.append(r)
        seqs.append(cur)
    return sorted(seqs, key=lambda s: s[0][2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--all", action="store_true", help="every plane (default: the largest planes)")
    a = ap.parse_args()
    seqs = planes(a.trace)
    if not seqs:
        raise SystemExit("no rounds in the trace")
    t0 = seqs[0][0][2]
    t1 = max(s[-1][5] for s in seqs)
    most = max(len(s) for s in seqs)
    print("%d planes, %.0f ms; per round (us), by eighths of the plane: search | dictionary update; coding" % (len(seqs), (t1 - t0) / 1e6))
    largest = [r for s in seqs if len(s) == most for r in s]
    med = lambda i, j: statistics.median(r[j] - r[i] for r in largest) / 1e3
    print("  the largest planes' rounds, medians: search %.0f, coding %.0f, dictionary update %.0f" % (
        med(2, 3), med(3, 4), med(4, 5)))
    for s in seqs:
        if not a.all and len(s) != most:
            continue
        n = len(s)
        eighths = [s[i * n // 8:(i + 1) * n // 8] for i in range(8)]
        mean = lambda rs, i, j: sum(r[j] - r[i] for r in rs) / max(1, len(rs)) / 1e3
        print("  start %7.0f ms, %3d rounds in %6.0f ms: %s | %s; %4.0f" % (
            (s[0][2] - t0) / 1e6, n, (s[-1][5] - s[0][2]) / 1e6,
            " ".join("%5.0f" % mean(e, 2, 3) for e in eighths),
            " ".join("%4.0f" % mean(e, 4, 5) for e in eighths),
            mean(s, 3, 4)))
    events = []
    for s in seqs:
        for r in s:
            events += [(r[2], 0, 1), (r[3], 0, -1), (r[3], 1, 1), (r[5], 1, -1)]
    events.sort()
    at = [0, 0]
    last = events[0][0]
    share = [collections.Counter(), collections.Counter()]
    for t, kind, d in events:
        for k in (0, 1):
            share[k][at[k]] += t - last
        last = t
        at[kind] += d
    span = sum(share[0].values())
    for k, what in ((0, "searching"), (1, "in the host part")):
        print("planes %s at once (share of the time): %s" % (
            what, " ".join("%d: %.2f" % (n, share[k][n] / span) for n in sorted(share[k]))))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    main()
