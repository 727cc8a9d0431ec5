#!/usr/bin/env python3
"""The 1080p test clip of MMP's speed target (docs/mmp.md, "Tiles"), made reproducibly:
four of scikit-image's colour photographs (astronaut, coffee, chelsea, rocket) scaled to
960x540 (bilinear, anti-aliased) in a 2x2 mosaic, panned 2 pixels a frame to the left
(cyclically), with Gaussian noise of sigma 2 (numpy's default_rng(FRAME)), converted to
yuv420p (BT.709 matrix, limited range, chroma the mean of each 2x2 block, all rounded to
nearest) and written as Y4M, 60 frames at 30 fps by default.

    /usr/bin/python3 scripts/mmp-clip.py clip.y4m [--frames 60]
    /usr/bin/python3 scripts/mmp-clip.py --save-mosaic mosaic.npz   # the 1920x1080 mosaic only
    python3 scripts/mmp-clip.py clip.y4m --mosaic mosaic.npz        # numpy only (no scikit-image)

The mosaic file lets a machine without scikit-image's images make the same clip.
"""
import argparse
import sys

import numpy as np


def mosaic():
    from skimage import data, transform
    quads = []
    for img in (data.astronaut(), data.coffee(), data.chelsea(), data.rocket()):
        small = transform.resize(img[..., :3], (540, 960), order=1, anti_aliasing=True, preserve_range=True)
        quads.append(np.clip(np.round(small), 0, 255).astype(np.uint8))
    return np.concatenate([np.concatenate(quads[:2], axis=1), np.concatenate(quads[2:], axis=1)], axis=0)


def to_yuv420(rgb):
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    cb = (b - y) / 1.8556
    cr = (r - y) / 1.5748
    Y = np.clip(np.round(16 + y * 219 / 255), 0, 255).astype(np.uint8)
    sub = lambda c: (c[0::2, 0::2] + c[1::2, 0::2] + c[0::2, 1::2] + c[1::2, 1::2]) / 4
    U = np.clip(np.round(128 + sub(cb) * 224 / 255), 0, 255).astype(np.uint8)
    V = np.clip(np.round(128 + sub(cr) * 224 / 255), 0, 255).astype(np.uint8)
    return Y, U, V


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", nargs="?")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--mosaic", help="read the mosaic from this .npz instead of scikit-image")
    ap.add_argument("--save-mosaic", help="write the mosaic to this .npz and stop")
    a = ap.parse_args()
    m = np.load(a.mosaic)["mosaic"] if a.mosaic else mosaic()
    if a.save_mosaic:
        np.savez_compressed(a.save_mosaic, mosaic=m)
        return
    if not a.output:
        ap.error("give an output .y4m (or --save-mosaic)")
    out = sys.stdout.buffer if a.output == "-" else open(a.output, "wb")
    out.write(b"YUV4MPEG2 W1920 H1080 F30:1 Ip A1:1 C420jpeg XCOLORRANGE=LIMITED\n")
    for f in range(a.frames):
        rgb = np.roll(m, -2 * f, axis=1).astype(np.float64)
        rgb += np.random.default_rng(f).normal(0, 2, rgb.shape)
        Y, U, V = to_yuv420(np.clip(np.round(rgb), 0, 255))
        out.write(b"FRAME\n" + Y.tobytes() + U.tobytes() + V.tobytes())
    out.close()


if __name__ == "__main__":
    main()
