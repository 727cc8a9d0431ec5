#!/usr/bin/env python3
"""Where a round's graph spends its time on the GPU, from a kernel trace (kernel_trace.cpp's
CSV) of the MMP block search: per graph launch (the kernels sharing a correlation id), its
span (first kernel's start to last kernel's end), the part before the 4x4 units' chain (its
first link's start), and each step of the chain: the link (chain_kernel), the next 4x4
unit's search (the leaf_small_kernel between two links) and the idle gaps between them.
Medians and 90th percentiles over the graphs of at least --min-blocks blocks (a link's
thread blocks), leaving out the first tenth of the run (start-up).

    python3 scripts/kernel-trace/chain_gaps.py trace.csv [--min-blocks 8]
"""
import argparse
import collections

from kernel_trace import short, quantile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--min-blocks", type=int, default=8)
    a = ap.parse_args()
    graphs = collections.defaultdict(list)
    copies = collections.defaultdict(list)  # by correlation id: (start, end, bytes, kind)
    launches = {}  # KERNEL_TRACE_API=1: each graph launch call's (start, end) by correlation id
    t_min, t_max = None, None
    for line in open(a.trace):
        p = line.rstrip("\n").split(",")
        if p[0] == "copy":
            copies[int(p[6])].append((int(p[1]), int(p[2]), int(p[4]), int(p[5])))
            continue
        if p[0] == "api":
            if p[5].startswith("cudaGraphLaunch"):
                launches[int(p[4])] = (int(p[1]), int(p[2]))
            continue
        if len(p) < 9:
            continue
        s, e, blocks, corr = int(p[0]), int(p[1]), int(p[3]), int(p[6])
        graphs[corr].append((s, e, blocks, short(p[8])))
        t_min = s if t_min is None else min(t_min, s)
        t_max = e if t_max is None else max(t_max, e)
    if not graphs:
        raise SystemExit("no kernels in " + a.trace)
    skip = t_min + (t_max - t_min) // 10
    stats = collections.defaultdict(list)
    for corr, ks in graphs.items():
        ks.sort()
        links = [k for k in ks if k[3] == "chain_kernel"]
        if len(links) < 2 or links[0][2] < a.min_blocks or ks[0][0] < skip:
            continue
        first_k, last_k = ks[0][0], max(k[1] for k in ks)
        stats["span"].append(last_k - first_k)
        stats["before the chain"].append(links[0][0] - first_k)
        stats["the chain"].append(links[-1][1] - links[0][0])
        stats["after the chain"].append(last_k - links[-1][1])
        stats["links in a graph"].append(len(links))
        if corr in launches:  # from the launch call's return to the graph's first copy or kernel
            first = min([first_k] + [c[0] for c in copies.get(corr, [])])
            stats["launch call"].append(launches[corr][1] - launches[corr][0])
            stats["launch call's end to the graph's start"].append(first - launches[corr][1])
        cs = sorted(copies.get(corr, []))
        if cs:  # KERNEL_TRACE_COPIES=1: the graph's own copies (inputs up, choices down)
            up = [c for c in cs if c[1] <= first_k]
            down = [c for c in cs if c[0] >= last_k]
            stats["with its copies: span"].append(max(last_k, cs[-1][1]) - min(first_k, cs[0][0]))
            if up:
                stats["first copy up to first kernel"].append(first_k - up[0][0])
                stats["a copy up"].append(sum(c[1] - c[0] for c in up) // len(up))
            if down:
                stats["last kernel to last copy down's end"].append(down[-1][1] - last_k)
                stats["a copy down"].append(sum(c[1] - c[0] for c in down) // len(down))
        for l0, l1 in zip(links, links[1:]):
            stats["a link"].append(l0[1] - l0[0])
            between = [k for k in ks if k[3] == "leaf_small_kernel" and k[0] >= l0[1] and k[1] <= l1[0]]
            if len(between) != 1:
                continue
            k = between[0]
            stats["gap: link to search"].append(k[0] - l0[1])
            stats["the 4x4 search"].append(k[1] - k[0])
            stats["gap: search to link"].append(l1[0] - k[1])
            stats["a step (link start to link start)"].append(l1[0] - l0[0])
    n = len(stats["span"])
    print("%d graphs of %d+ blocks (of %d launches), us: median / 90th percentile" % (n, a.min_blocks, len(graphs)))
    for name, v in stats.items():
        v.sort()
        scale = 1 if name == "links in a graph" else 1e-3
        print("  %-36s %8.1f %8.1f" % (name, quantile(v, 0.5) * scale, quantile(v, 0.9) * scale))


if __name__ == "__main__":
    main()
