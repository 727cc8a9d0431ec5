#!/usr/bin/env python3
"""Summary of a kernel trace (kernel_trace.cpp's CSV): the share of time some kernel runs,
how many run at once, and each kernel's total and mean time, leaving out the first
tenth of the run (start-up).

    python3 scripts/kernel-trace/kernel_trace.py trace.csv
"""
import collections
import re
import sys


def short(name):
    # The innermost identifier of an Itanium-mangled nested name: _ZN 3vfp 4cuda ... 17leaf_small_kernel E ...
    if not name.startswith("_ZN"):
        return name[:40]
    i, last = 3, name[:40]
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        last = name[j : j + n]
        i = j + n
    return last


def quantile(ordered, f):
    """The value a fraction f of the way up a sorted list."""
    return ordered[min(len(ordered) - 1, int(f * len(ordered)))]


def covered(intervals):
    """How long at least one of the (start, end) intervals is open."""
    total, at = 0, None
    for s, e in sorted(intervals):
        if at is None or s > at:
            total += e - s
            at = e
        elif e > at:
            total += e - at
            at = e
    return total


def main():
    rows, api, streams = [], [], collections.defaultdict(list)
    launches = collections.defaultdict(list)  # correlation id: its kernels (start, end)
    for line in open(sys.argv[1]):
        p = line.rstrip("\n").split(",", 7)
        if p[0] == "api":
            api.append((int(p[1]), int(p[2]), int(p[3]), int(p[4]), p[5]))
        elif len(p) == 8:
            rows.append((int(p[0]), int(p[1]), int(p[3]), p[7]))
            streams[int(p[2])].append((int(p[0]), int(p[1])))
            launches[int(p[6])].append((int(p[0]), int(p[1])))
    if not rows:
        sys.exit("no kernels in the trace")
    t0 = min(r[0] for r in rows)
    t1 = max(r[1] for r in rows)
    lo = t0 + (t1 - t0) // 10
    edges = []
    for s, e, _, _ in rows:
        s = max(s, lo)
        if e > s:
            edges += [(s, 1), (e, -1)]
    edges.sort()
    at_once = collections.Counter()
    running, last = 0, lo
    for t, d in edges:
        at_once[min(running, 8)] += t - last
        running += d
        last = t
    span = t1 - lo
    busy = span - at_once[0]
    print("%d kernels, %.3f s traced: some kernel running %.1f%% of the time" % (len(rows), span * 1e-9, 100 * busy / span))
    print("kernels at once (share of the time): " + "  ".join("%d: %.2f" % (k, at_once[k] / span) for k in sorted(at_once)))
    total = collections.defaultdict(lambda: [0, 0])
    for s, e, grid, name in rows:
        if s >= lo:
            t = total[(short(name), grid)]
            t[0] += 1
            t[1] += e - s
    by_name = collections.defaultdict(int)
    for (name, _), (_, ns) in total.items():
        by_name[name] += ns
    all_ns = sum(by_name.values())
    for name, ns in sorted(by_name.items(), key=lambda x: -x[1]):
        print("  %-28s %8.3f s  %5.1f%%" % (name, ns * 1e-9, 100 * ns / all_ns))
    print("largest (kernel, thread blocks):")
    for (name, grid), (n, ns) in sorted(total.items(), key=lambda x: -x[1][1])[:10]:
        print("  %-28s %6d blocks  %7d launches  %8.3f s  %8.1f us each" % (name, grid, n, ns * 1e-9, ns / n * 1e-3))
    # On one stream each kernel follows the last: the idle time between them is the cost of
    # a dependent step beyond its work (launch, scheduling, waiting for SMs).
    gaps = []
    for ks in streams.values():
        ks.sort()
        gaps += [b[0] - a[1] for a, b in zip(ks, ks[1:]) if b[0] >= lo and b[0] > a[1] and b[0] - a[1] < 1000000]
    if gaps:
        gaps.sort()
        print("idle time between a stream's consecutive kernels (under 1 ms): %d gaps, median %.1f us, p90 %.1f us, "
              "p99 %.1f us" % (len(gaps), quantile(gaps, 0.5) * 1e-3, quantile(gaps, 0.9) * 1e-3,
                               quantile(gaps, 0.99) * 1e-3))
    if api:
        summarize_api(api, lo, t1)
        summarize_graphs(api, launches, lo)


def summarize_api(api, lo, t1):
    """The runtime calls (KERNEL_TRACE_API=1) after the first tenth: each call's count and
    time, and how much of the time threads spent inside the runtime at all."""
    calls = collections.defaultdict(list)
    threads = collections.defaultdict(int)
    inside = []
    for s, e, tid, _, name in api:
        if s < lo or s > t1:
            continue
        calls[name].append(e - s)
        if not name.startswith("cudaStreamSynchronize") and not name.startswith("cudaEventSynchronize"):
            threads[tid] += e - s
            inside.append((s, e))
    span = t1 - lo
    inside = covered(inside)
    print("runtime calls (waits for the device left out of the shares): some thread inside the runtime %.1f%% "
          "of the time, the threads' calls summed %.2f s a second" % (100 * inside / span, sum(threads.values()) / span))
    print("  %-36s %8s %9s %8s %8s %9s" % ("call", "count", "total s", "mean us", "p99 us", "max us"))
    for name, d in sorted(calls.items(), key=lambda x: -sum(x[1])):
        d.sort()
        print("  %-36s %8d %9.3f %8.1f %8.1f %9.1f" % (name, len(d), sum(d) * 1e-9, sum(d) / len(d) * 1e-3,
                                                     quantile(d, 0.99) * 1e-3, d[-1] * 1e-3))


def summarize_graphs(api, launches, lo):
    """Each cudaGraphLaunch after the first tenth: from the call's start to its graph's first
    kernel (the wait to start), from there to its last kernel's end (the span), and how much
    of the span some kernel of the graph was running (the rest: its steps waiting)."""
    wait, span, busy, n = [], [], [], 0
    for s, e, _, corr, name in api:
        if not name.startswith("cudaGraphLaunch") or s < lo or corr not in launches:
            continue
        ks = launches[corr]
        first, last = min(k[0] for k in ks), max(k[1] for k in ks)
        wait.append(first - s)
        span.append(last - first)
        busy.append(covered(ks) / max(1, last - first))
        n += 1
    if not n:
        return
    wait.sort(), span.sort(), busy.sort()
    print("graph launches: %d; from the call to the first kernel median %.0f us (p90 %.0f), first kernel to last "
          "kernel's end median %.0f us (p90 %.0f), some kernel of the graph running %.0f%% of that (median)" %
          (n, quantile(wait, 0.5) * 1e-3, quantile(wait, 0.9) * 1e-3, quantile(span, 0.5) * 1e-3,
           quantile(span, 0.9) * 1e-3, 100 * quantile(busy, 0.5)))


if __name__ == "__main__":
    main()
