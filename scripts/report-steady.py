#!/usr/bin/env python3
"""A run's fill against its steady state, from `vfpipe run --report R.json --report-frames`.

    vfpipe run -i clip.y4m -f mmp=lambda=25:tile=256x256 --device cuda -o null \\
        --report r.json --report-frames
    python3 scripts/report-steady.py r.json [more.json ...]

For each report: the frames, the wall time from the first capture to the last output, when
the 1st, 8th and 16th frames came out, the rate from the 16th (and 32nd) output on (the
steady state, once the frames in flight are full), and the latency (submit to done) of the
first 8 frames and of frames 40-47. A run whose first frame takes as long as the later ones
pays only the fill (one frame's latency); a first wave much slower than later frames points
at a start-up cost.
"""
import json
import sys


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        with open(path) as f:
            frames = json.load(f).get("frames")
        if not frames or len(frames) < 33:
            sys.exit(f"{path}: needs --report-frames and at least 33 frames")
        t0 = min(fr["capture_ns"] for fr in frames)
        outs = sorted((fr["output_ns"] - t0) / 1e9 for fr in frames)
        lat = [(fr["done_ns"] - fr["submit_ns"]) / 1e6 for fr in frames]
        n = len(outs)

        def rate(a):
            return (n - a) / (outs[n - 1] - outs[a - 1])

        print(f"{path}: {n} frames, wall {outs[-1]:.2f} s ({n / outs[-1]:.1f} frames/s); "
              f"out at {outs[0]:.2f} / {outs[7]:.2f} / {outs[15]:.2f} s (1st / 8th / 16th); "
              f"steady {rate(16):.1f} frames/s from the 16th, {rate(32):.1f} from the 32nd; "
              f"latency ms, first 8: {' '.join(f'{x:.0f}' for x in lat[:8])}; "
              f"frames 40-47: {' '.join(f'{x:.0f}' for x in lat[40:48])}")


if __name__ == "__main__":
    main(sys.argv[1:])
