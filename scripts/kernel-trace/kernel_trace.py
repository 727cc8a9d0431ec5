#!/usr/bin/env python3
"""Summary of a kernel trace (kernel_trace.cpp's CSV): the share of time some kernel runs,
how many run at once, each kernel's total and mean time, and how much of the GPU's room
for resident thread blocks each kernel holds, leaving out the first tenth of the run
(start-up).

    python3 scripts/kernel-trace/kernel_trace.py trace.csv [--sms 132]

The room: a kernel's thread blocks that fit on an SM at once follow from its threads,
registers and shared memory (an H100's SM: 2048 threads, 32 blocks, 64 K registers
allocated 256 a warp, 228 KB of shared memory with 1 KB reserved a block); while it runs
it holds min(its blocks, SMs x that) / (SMs x that) of the GPU's room for its blocks. That
is an upper bound (a kernel's last blocks leave room behind them), so the shares compare
kernels; summed over kernels and divided by the traced time it says how full the GPU's
room was on average.
"""
import argparse
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


def blocks_per_sm(threads, regs, smem):
    """Thread blocks of a kernel resident on one SM at once (an H100's limits)."""
    warps = (threads + 31) // 32
    by_regs = 65536 // max(1, warps * ((max(regs, 1) * 32 + 255) // 256 * 256))
    by_smem = 233472 // (smem + 1024) if smem is not None else 32
    return max(1, min(32, 2048 // max(1, threads), by_regs, by_smem))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H100 SXM: 132)")
    a = ap.parse_args()
    rows, api, streams = [], [], collections.defaultdict(list)
    launches = collections.defaultdict(list)  # correlation id: its kernels (start, end)
    room = []  # (kernel name, start, ns x the share of the room it held)
    for line in open(a.trace):
        p = line.rstrip("\n").split(",", 8)
        if p[0] == "api":
            api.append((int(p[1]), int(p[2]), int(p[3]), int(p[4]), ",".join(p[5:])))
            continue
        if len(p) == 8 or (len(p) == 9 and not p[7].lstrip("-").isdigit()):  # no shared memory recorded
            p = p[:7] + [None, ",".join(p[7:])]
        if len(p) == 9:
            s, e, grid = int(p[0]), int(p[1]), int(p[3])
            rows.append((s, e, grid, p[8]))
            streams[int(p[2])].append((s, e))
            launches[int(p[6])].append((s, e))
            fit = a.sms * blocks_per_sm(int(p[4]), int(p[5]), None if p[7] is None else int(p[7]))
            room.append((short(p[8]), s, (e - s) * min(grid, fit) / fit))
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
    held = collections.defaultdict(float)
    for name, s, ns in room:
        if s >= lo:
            held[name] += ns
    all_held = sum(held.values())
    print("the room for resident thread blocks held, averaged over the traced time: %.0f%% (an upper bound); "
          "by kernel:" % (100 * all_held / span))
    for name, ns in sorted(held.items(), key=lambda x: -x[1])[:10]:
        print("  %-28s %5.1f%% of the room held" % (name, 100 * ns / all_held))
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
