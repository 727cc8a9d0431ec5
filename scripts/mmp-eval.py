#!/usr/bin/env python3
"""Rate-distortion of vfpipe's MMP codec against JPEG (cjpeg -optimize), JPEG 2000
(opj_compress) and H.264 intra (ffmpeg libx264, every frame a key frame) on gray and colour
images: PSNR against bits per pixel for several lambdas / qualities, and each codec's PSNR
at 0.5 bpp (linear interpolation of its curve). Tables to stdout (markdown) and --json.
Colour images go to every codec as RGB and come back as RGB (MMP: vfpipe's conversion to
yuv420p and back); their PSNR is over the three RGB channels, bpp counts all bits.

    /usr/bin/python3 scripts/mmp-eval.py [--size 512] [--set gray,color] [--only camera,text]
                                         [--block 8|16|32] [--vfpipe build/vfpipe] [--json out.json]
                                         [--plot rd.png]
    /usr/bin/python3 scripts/mmp-eval.py --from a.json,b.json --plot rd.png   # plot saved results

Needs: python3-skimage (images), libjpeg-turbo-progs, libopenjp2-tools, ffmpeg; python3-matplotlib for --plot.
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np

try:  # the images and PNG reading; the curve arithmetic (bd_psnr, at_bpp) works without
    from skimage import data, io
except ImportError:
    data = io = None


def color_images(size):
    def crop(a):
        h, w = a.shape[:2]
        s = min(size, h, w)
        y, x = (h - s) // 2, (w - s) // 2
        return np.ascontiguousarray(a[y:y + s, x:x + s, :3])

    return {
        "astronaut (colour photo)": crop(data.astronaut()),
        "coffee (colour photo)": crop(data.coffee()),
        "chelsea (colour photo)": crop(data.chelsea()),
    }


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
        # scikit-image's `text`: a photograph of handwritten formulas on lined paper (blur,
        # perspective, paper texture) -- text by content, a photograph by statistics.
        "text (scan)": np.ascontiguousarray(data.text()[:, :min(size, data.text().shape[1])]),
        # scikit-image's `page`: a scanned page of printed text (uneven illumination).
        "text (printed page)": np.ascontiguousarray(data.page()[:190, :min(size, data.page().shape[1])]),  # even: x264 4:2:0
    }
    # Graphics: flat shapes, lines and lettering-like strokes.
    g = np.full((size, size), 235, np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    g[(xx // 24 + yy // 24) % 5 == 0] = 40
    g[((xx - size // 2) ** 2 + (yy - size // 2) ** 2) < (size // 5) ** 2] = 120
    g[(yy % 37 < 2)] = 10
    g[(xx % 53 < 3) & (yy > size // 2)] = 200
    out["graphics (synthetic)"] = g
    out["text (rendered)"] = rendered_text(size)
    return out


def rendered_text(size):
    """Black prose on white as a screen or a document page shows it: DejaVu Sans 13 px,
    anti-aliased (Debian fonts-dejavu-core; PIL's bitmap font if it is missing)."""
    from PIL import Image, ImageDraw, ImageFont

    words = ("the quick brown fox jumps over the lazy dog while vfpipe codes every block of this "
             "page with patterns it has seen before so that letters repeat cheaply").split()
    img = Image.new("L", (size, size), 255)
    d = ImageDraw.Draw(img)
    try:
        font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 13)
    except OSError:
        font = ImageFont.load_default()
    rng = np.random.default_rng(1)  # words in random order: letters recur, lines do not
    y, word = 3, str(rng.choice(words))
    while y < size - 14:
        line = ""
        while d.textlength(line + word, font=font) < size - 8:
            line += word + " "
            word = str(rng.choice(words))
        d.text((4, y), line, fill=0, font=font)
        y += 17
    return np.asarray(img, np.uint8).copy()


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)


def write_pgm(path, img):  # PGM for gray, PPM for RGB
    with open(path, "wb") as f:
        f.write(b"%s\n%d %d\n255\n" % (b"P6" if img.ndim == 3 else b"P5", img.shape[1], img.shape[0]))
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
    w, h, c = int(parts[1]), int(parts[2]), 3 if parts[0] == b"P6" else 1
    a = np.frombuffer(raw[pos + 1:pos + 1 + w * h * c], np.uint8)
    return a.reshape(h, w, 3) if c == 3 else a.reshape(h, w)


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


def curve_mmp(img, tmp, vfpipe, lambdas, block=16):
    pts = []
    color = img.ndim == 3
    src = os.path.join(tmp, "in.ppm" if color else "in.y4m")
    enc, dec = os.path.join(tmp, "in.mmp"), os.path.join(tmp, "out.png" if color else "out.y4m")
    if color:
        write_pgm(src, img)
    else:
        write_y4m(src, img)
    planes = 3 if color else 1
    for lam in lambdas:
        t = time.time()
        run([vfpipe, "mmp", "encode", "-y", src, "-o", enc, "--lambda", str(lam), "--block", str(block)] + (["--pix-fmt", os.environ.get("MMP_PIXFMT", "yuv420p")] if color else []))
        secs = time.time() - t
        run([vfpipe, "mmp", "decode", "-y", enc, "-o", dec])
        out = io.imread(dec) if color else read_y4m(dec, img.shape)
        bits = (os.path.getsize(enc) - 35 - 4 * planes) * 8  # payload only: no container header, plane lengths
        pts.append({"param": lam, "bpp": bits / (img.shape[0] * img.shape[1]), "psnr": psnr(img, out), "seconds": secs})
    return pts


def curve_jpeg(img, tmp, qualities):
    pts = []
    ext = "ppm" if img.ndim == 3 else "pgm"
    src, enc, dec = os.path.join(tmp, "in." + ext), os.path.join(tmp, "x.jpg"), os.path.join(tmp, "x." + ext)
    write_pgm(src, img)
    for q in qualities:
        run(["cjpeg", "-quality", str(q), "-optimize", "-outfile", enc, src])
        run(["djpeg", "-pnm", "-outfile", dec, enc])
        pts.append({"param": q, "bpp": os.path.getsize(enc) * 8 / (img.shape[0] * img.shape[1]), "psnr": psnr(img, read_pgm(dec))})
    return pts


def curve_j2k(img, tmp, bpps):
    pts = []
    ext = "ppm" if img.ndim == 3 else "pgm"
    src, enc, dec = os.path.join(tmp, "in." + ext), os.path.join(tmp, "x.j2k"), os.path.join(tmp, "y." + ext)
    write_pgm(src, img)
    depth = 24.0 if img.ndim == 3 else 8.0  # -r is the compression ratio of the raw samples
    for b in bpps:
        run(["opj_compress", "-i", src, "-o", enc, "-r", str(depth / b)])
        run(["opj_decompress", "-i", enc, "-o", dec])
        pts.append({"param": b, "bpp": os.path.getsize(enc) * 8 / (img.shape[0] * img.shape[1]), "psnr": psnr(img, read_pgm(dec))})
    return pts


def curve_x264(img, tmp, qps):
    pts = []
    src, enc, dec = os.path.join(tmp, "in.gray"), os.path.join(tmp, "x.264"), os.path.join(tmp, "x.out")
    img.tofile(src)
    h, w = img.shape[:2]
    fmt = "rgb24" if img.ndim == 3 else "gray"
    for qp in qps:
        run(["ffmpeg", "-y", "-f", "rawvideo", "-pix_fmt", fmt, "-s", f"{w}x{h}", "-i", src, "-c:v", "libx264",
             "-preset", "veryslow", "-qp", str(qp), "-x264-params", "keyint=1", "-pix_fmt", "yuv420p", "-f", "h264", enc])
        run(["ffmpeg", "-y", "-i", enc, "-f", "rawvideo", "-pix_fmt", fmt, dec])
        out = np.fromfile(dec, np.uint8)[: img.size].reshape(img.shape)
        # The chroma of a gray picture costs a few bits; counted, as a user would pay them.
        pts.append({"param": qp, "bpp": os.path.getsize(enc) * 8 / (w * h), "psnr": psnr(img, out)})
    return pts


def at_bpp(pts, target):
    pts = sorted(pts, key=lambda p: p["bpp"])
    for a, b in zip(pts, pts[1:]):
        if a["bpp"] <= target <= b["bpp"]:
            t = (target - a["bpp"]) / (b["bpp"] - a["bpp"]) if b["bpp"] > a["bpp"] else 0
            return a["psnr"] + t * (b["psnr"] - a["psnr"])
    return None


def bd_psnr(a, b):
    """Bjontegaard delta PSNR of curve a over curve b: cubic fits of PSNR over log10(bpp),
    the mean difference over the rates both cover; None without an overlap of 4+ points."""
    if len(a) < 4 or len(b) < 4:
        return None
    ra, rb = np.log10([p["bpp"] for p in a]), np.log10([p["bpp"] for p in b])
    lo, hi = max(ra.min(), rb.min()), min(ra.max(), rb.max())
    if hi <= lo:
        return None
    fa, fb = np.polyint(np.polyfit(ra, [p["psnr"] for p in a], 3)), np.polyint(np.polyfit(rb, [p["psnr"] for p in b], 3))
    return ((np.polyval(fa, hi) - np.polyval(fa, lo)) - (np.polyval(fb, hi) - np.polyval(fb, lo))) / (hi - lo), 10 ** lo, 10 ** hi


def plot(results, path):
    """One panel per image: PSNR against bpp for every codec, 0.5 bpp marked (matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    style = {"MMP": ("tab:red", "o"), "JPEG": ("tab:gray", "s"), "JPEG 2000": ("tab:blue", "^"),
             "H.264 intra": ("tab:green", "d")}
    for ax, name in zip(axes.flat, names):
        r = results[name]
        for codec, pts in r["curves"].items():
            pts = sorted(pts, key=lambda p: p["bpp"])
            c, m = style.get(codec, ("black", "."))
            ax.plot([p["bpp"] for p in pts], [p["psnr"] for p in pts], marker=m, ms=3, lw=1.2, color=c, label=codec)
        ax.axvline(0.5, color="0.8", lw=0.8, zorder=0)
        ax.set_xlim(0, 2.0)
        ax.set_title(f"{name}, {r['shape'][1]}x{r['shape'][0]}", fontsize=9)
        ax.set_xlabel("bits per pixel", fontsize=8)
        ax.set_ylabel("PSNR (dB)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--set", default="gray,color", help="image sets: gray, color")
    ap.add_argument("--only", default="", help="comma list of image name prefixes")
    ap.add_argument("--vfpipe", default=os.path.join(os.path.dirname(__file__), "..", "build", "vfpipe"))
    ap.add_argument("--lambdas", default="6,20,60,150,400,1000")
    ap.add_argument("--block", type=int, default=16, choices=[8, 16, 32], help="MMP block size")
    ap.add_argument("--json")
    ap.add_argument("--plot", help="write the curves as a PNG (matplotlib)")
    ap.add_argument("--from", dest="from_json", help="comma list of saved --json results: plot them, code nothing")
    a = ap.parse_args()
    lambdas = [float(x) for x in a.lambdas.split(",")]
    results = {}
    if a.from_json:
        for f in a.from_json.split(","):
            with open(f) as fh:
                results.update(json.load(fh))
        if a.only:
            results = {k: v for k, v in results.items() if any(k.startswith(o) for o in a.only.split(","))}
        plot(results, a.plot or "rd.png")
        return
    with tempfile.TemporaryDirectory() as tmp:
        todo = {}
        if "gray" in a.set:
            todo.update(images(a.size))
        if "color" in a.set:
            todo.update(color_images(a.size))
        for name, img in todo.items():
            if a.only and not any(name.startswith(k) for k in a.only.split(",")):
                continue
            r = {
                "MMP": curve_mmp(img, tmp, a.vfpipe, lambdas, a.block),
                "JPEG": curve_jpeg(img, tmp, [5, 10, 20, 30, 45, 60, 75, 90]),
                "JPEG 2000": curve_j2k(img, tmp, [0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5]),
                "H.264 intra": curve_x264(img, tmp, [48, 42, 36, 32, 28, 24, 20]),
            }
            results[name] = {"shape": list(img.shape), "curves": r}
            if a.json:  # partial results survive an interrupted run
                with open(a.json, "w") as f:
                    json.dump(results, f, indent=1)
            print(f"\n### {name}, {img.shape[1]}x{img.shape[0]}\n")
            print("| codec | PSNR at 0.5 bpp | points (bpp / dB) |")
            print("|---|---|---|")
            for codec, pts in r.items():
                v = at_bpp(pts, 0.5)
                pp = ", ".join(f"{p['bpp']:.3f}/{p['psnr']:.2f}" for p in sorted(pts, key=lambda p: p["bpp"]))
                print(f"| {codec} | {'%.2f dB' % v if v is not None else 'n/a'} | {pp} |")
            for peer in ("JPEG", "JPEG 2000", "H.264 intra"):
                bd = bd_psnr(r["MMP"], r[peer])
                if bd:
                    print(f"\nMMP vs {peer}: BD-PSNR {bd[0]:+.2f} dB over {bd[1]:.3f}..{bd[2]:.3f} bpp", end="")
            print()
            secs = [p["seconds"] for p in r["MMP"]]
            print(f"\nMMP encode time per image: {min(secs):.1f}..{max(secs):.1f} s (one core)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
