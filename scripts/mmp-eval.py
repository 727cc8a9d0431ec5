#!/usr/bin/env python3
"""Rate-distortion of vfpipe's MMP codec against JPEG (cjpeg -optimize), JPEG 2000
(opj_compress) and H.264 intra (ffmpeg libx264, every frame a key frame) on gray images:
PSNR against bits per pixel for several lambdas / qualities, and each codec's PSNR at
0.5 bpp (linear interpolation of its curve). Tables to stdout (markdown) and --json.

    /usr/bin/python3 scripts/mmp-eval.py [--size 256] [--vfpipe build/vfpipe] [--json out.json]

Needs: python3-skimage (images), libjpeg-turbo-progs, libopenjp2-tools, ffmpeg.
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np
from skimage import data


def images(size):
    def crop(a):
        h, w = a.shape[:2]
        s = min(size, h, w)
        y, x = (h - s) // 2, (w - s) // 2
        return np.ascontiguousarray(a[y:y + s, x:x + s])

    gray = lambda rgb: np.round(rgb[..., :3] @ [0.299, 0.587, 0.114]).astype(np.uint8)
    out = {
        "camera (photo)": crop(data.camera()),
        "astronaut (photo)": crop(gray(data.astronaut())),
        "coffee (photo)": crop(gray(data.coffee())),
        "text (scan)": np.ascontiguousarray(data.text()[:, :min(size, data.text().shape[1])]),
    }
    # Graphics: flat shapes, lines and lettering-like strokes.
    g = np.full((size, size), 235, np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    g[(xx // 24 + yy // 24) % 5 == 0] = 40
    g[((xx - size // 2) ** 2 + (yy - size // 2) ** 2) < (size // 5) ** 2] = 120
    g[(yy % 37 < 2)] = 10
    g[(xx % 53 < 3) & (yy > size // 2)] = 200
    out["graphics (synthetic)"] = g
    return out


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)


def write_pgm(path, img):
    with open(path, "wb") as f:
        f.write(b"P5\n%d %d\n255\n" % (img.shape[1], img.shape[0]))
        f.write(img.tobytes())


def read_pgm(path):
    with open(path, "rb") as f:
        raw = f.read()
    parts, pos = [], 0
    while len(parts) < 4:  # magic, width, height, maxval; '#' comments skipped
        while raw[pos:pos + 1].isspace():
            pos += 1
        if raw[pos:pos + 1] == b"#":
            pos = raw.index(b"\n", pos) + 1
            continue
        start = pos
        while not raw[pos:pos + 1].isspace():
            pos += 1
        parts.append(raw[start:pos])
    w, h = int(parts[1]), int(parts[2])
    return np.frombuffer(raw[pos + 1:pos + 1 + w * h], np.uint8).reshape(h, w)


def write_y4m(path, img):
    with open(path, "wb") as f:
        f.write(b"YUV4MPEG2 W%d H%d F25:1 Ip A1:1 Cmono\nFRAME\n" % (img.shape[1], img.shape[0]))
        f.write(img.tobytes())


def read_y4m(path, shape):
    raw = open(path, "rb").read()
    start = raw.index(b"FRAME\n") + 6
    return np.frombuffer(raw[start:start + shape[0] * shape[1]], np.uint8).reshape(shape)


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def curve_mmp(img, tmp, vfpipe, lambdas):
    pts = []
    src, enc, dec = os.path.join(tmp, "in.y4m"), os.path.join(tmp, "in.mmp"), os.path.join(tmp, "out.y4m")
    write_y4m(src, img)
    for lam in lambdas:
        t = time.time()
        run([vfpipe, "mmp", "encode", src, "-o", enc, "--lambda", str(lam)])
        secs = time.time() - t
        run([vfpipe, "mmp", "decode", enc, "-o", dec])
        bits = (os.path.getsize(enc) - 34 - 4) * 8  # payload only: no container header, plane length
        pts.append({"param": lam, "bpp": bits / img.size, "psnr": psnr(img, read_y4m(dec, img.shape)), "seconds": secs})
    return pts


def curve_jpeg(img, tmp, qualities):
    pts = []
    src, enc, dec = os.path.join(tmp, "in.pgm"), os.path.join(tmp, "x.jpg"), os.path.join(tmp, "x.pgm")
    write_pgm(src, img)
    for q in qualities:
        run(["cjpeg", "-quality", str(q), "-optimize", "-outfile", enc, src])
        run(["djpeg", "-pnm", "-outfile", dec, enc])
        pts.append({"param": q, "bpp": os.path.getsize(enc) * 8 / img.size, "psnr": psnr(img, read_pgm(dec))})
    return pts


def curve_j2k(img, tmp, bpps):
    pts = []
    src, enc, dec = os.path.join(tmp, "in.pgm"), os.path.join(tmp, "x.j2k"), os.path.join(tmp, "y.pgm")
    write_pgm(src, img)
    for b in bpps:
        run(["opj_compress", "-i", src, "-o", enc, "-r", str(8.0 / b)])
        run(["opj_decompress", "-i", enc, "-o", dec])
        pts.append({"param": b, "bpp": os.path.getsize(enc) * 8 / img.size, "psnr": psnr(img, read_pgm(dec))})
    return pts


def curve_x264(img, tmp, qps):
    pts = []
    src, enc, dec = os.path.join(tmp, "in.gray"), os.path.join(tmp, "x.264"), os.path.join(tmp, "x.out")
    img.tofile(src)
    h, w = img.shape
    for qp in qps:
        run(["ffmpeg", "-y", "-f", "rawvideo", "-pix_fmt", "gray", "-s", f"{w}x{h}", "-i", src, "-c:v", "libx264",
             "-preset", "veryslow", "-qp", str(qp), "-x264-params", "keyint=1", "-pix_fmt", "yuv420p", "-f", "h264", enc])
        run(["ffmpeg", "-y", "-i", enc, "-f", "rawvideo", "-pix_fmt", "gray", dec])
        out = np.fromfile(dec, np.uint8)[: w * h].reshape(h, w)
        # The chroma of a gray picture costs a few bits; counted, as a user would pay them.
        pts.append({"param": qp, "bpp": os.path.getsize(enc) * 8 / img.size, "psnr": psnr(img, out)})
    return pts


def at_bpp(pts, target):
    pts = sorted(pts, key=lambda p: p["bpp"])
    for a, b in zip(pts, pts[1:]):
        if a["bpp"] <= target <= b["bpp"]:
            t = (target - a["bpp"]) / (b["bpp"] - a["bpp"]) if b["bpp"] > a["bpp"] else 0
            return a["psnr"] + t * (b["psnr"] - a["psnr"])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--vfpipe", default=os.path.join(os.path.dirname(__file__), "..", "build", "vfpipe"))
    ap.add_argument("--lambdas", default="6,20,60,150,400,1000")
    ap.add_argument("--json")
    a = ap.parse_args()
    lambdas = [float(x) for x in a.lambdas.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, img in images(a.size).items():
            r = {
                "MMP": curve_mmp(img, tmp, a.vfpipe, lambdas),
                "JPEG": curve_jpeg(img, tmp, [5, 10, 20, 30, 45, 60, 75, 90]),
                "JPEG 2000": curve_j2k(img, tmp, [0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5]),
                "H.264 intra": curve_x264(img, tmp, [48, 42, 36, 32, 28, 24, 20]),
            }
            results[name] = {"shape": list(img.shape), "curves": r}
            print(f"\n### {name}, {img.shape[1]}x{img.shape[0]}\n")
            print("| codec | PSNR at 0.5 bpp | points (bpp / dB) |")
            print("|---|---|---|")
            for codec, pts in r.items():
                v = at_bpp(pts, 0.5)
                pp = ", ".join(f"{p['bpp']:.3f}/{p['psnr']:.2f}" for p in sorted(pts, key=lambda p: p["bpp"]))
                print(f"| {codec} | {'%.2f dB' % v if v is not None else 'n/a'} | {pp} |")
            secs = [p["seconds"] for p in r["MMP"]]
            print(f"\nMMP encode time per image: {min(secs):.1f}..{max(secs):.1f} s (one core)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
