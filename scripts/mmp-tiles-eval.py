#!/usr/bin/env python3
"""Rate-distortion cost of MMP's tiles (docs/mmp.md, "Tiles"): each tile mode and size
against the untiled codec on scikit-image's photographs (gray, centre crops of at most
512x512), at several lambdas: bpp, PSNR, encode and decode seconds per point, and the
Bjontegaard delta PSNR (and rate) of each tiling against untiled.

    /usr/bin/python3 scripts/mmp-tiles-eval.py [--vfpipe build/vfpipe] [--lambdas 20,40,60,100,150]
        [--configs untiled,sync:128,...] [--only camera,astronaut] [--json out.json]
        [--save-npz crops.npz | --npz crops.npz]   # the crops to a file / from it (no scikit-image)
    /usr/bin/python3 scripts/mmp-tiles-eval.py --from out.json      # tables from saved results
    /usr/bin/python3 scripts/mmp-tiles-eval.py --clip clip.y4m --configs sync:64,sync:128,sync:256
        # frames of a Y4M (e.g. scripts/mmp-clip.py's 1080p clip) against the first config;
        # bpp and PSNR (all planes) as vfpipe reports them

A config is `untiled` or MODE:SIZE (MODE: sync, sync-dict, independent; SIZE: N or WxH),
optionally followed by `+dictN` (--dict N), `+replace` (--dict-full replace), `+wavefront`
(--tile-scan wavefront) and `+minuN` (--min-unit N), e.g. `sync:256+dict512+replace`,
`sync:512+wavefront`, `sync:256+minu8`.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("mmp_eval", os.path.join(here, "mmp-eval.py"))
ev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ev)

DEFAULT_CONFIGS = ("untiled,sync:256,sync:128,sync:64,sync-dict:128,sync-dict:64,"
                   "independent:256,independent:128,independent:64")


def bd_rate(a, b):
    """Bjontegaard delta rate of curve a against b, in percent (negative: a needs fewer bits)."""
    if len(a) < 4 or len(b) < 4:
        return None
    pa, pb = [p["psnr"] for p in a], [p["psnr"] for p in b]
    lo, hi = max(min(pa), min(pb)), min(max(pa), max(pb))
    if hi <= lo:
        return None
    fa = np.polyint(np.polyfit(pa, np.log10([p["bpp"] for p in a]), 3))
    fb = np.polyint(np.polyfit(pb, np.log10([p["bpp"] for p in b]), 3))
    d = ((np.polyval(fa, hi) - np.polyval(fa, lo)) - (np.polyval(fb, hi) - np.polyval(fb, lo))) / (hi - lo)
    return (10 ** d - 1) * 100


def config_args(config):
    """vfpipe mmp encode's options for a config (see the module's help)."""
    base, *extras = config.split("+")
    args = [] if base == "untiled" else ["--tile-mode", base.split(":")[0], "--tile", base.split(":")[1]]
    for e in extras:
        if e.startswith("dict"):
            args += ["--dict", e[4:]]
        elif e == "replace":
            args += ["--dict-full", "replace"]
        elif e == "wavefront":
            args += ["--tile-scan", "wavefront"]
        elif e.startswith("minu"):
            args += ["--min-unit", e[4:]]
        else:
            sys.exit(f"unknown config part '{e}' in '{config}'")
    return args


def curve(img, tmp, vfpipe, lambdas, config):
    src, enc, dec = (os.path.join(tmp, n) for n in ("in.y4m", "in.mmp", "out.y4m"))
    ev.write_y4m(src, img)
    tile = config_args(config)
    pts = []
    for lam in lambdas:
        t = time.time()
        ev.run([vfpipe, "mmp", "encode", "-y", src, "-o", enc, "--lambda", str(lam)] + tile)
        secs = time.time() - t
        t = time.time()
        ev.run([vfpipe, "mmp", "decode", "-y", enc, "-o", dec])
        dsecs = time.time() - t
        out = ev.read_y4m(dec, img.shape)
        header = 35 if config.split("+")[0] == "untiled" else 44  # version 3 adds the tile grid
        bits = (os.path.getsize(enc) - header - 4) * 8  # payload only (tile tables included)
        pts.append({"param": lam, "bpp": bits / img.size, "psnr": ev.psnr(img, out), "seconds": secs,
                    "decode_seconds": dsecs})
        print(f"  {config} lambda {lam}: {pts[-1]['bpp']:.4f} bpp {pts[-1]['psnr']:.2f} dB "
              f"{secs:.1f} s encode {dsecs:.2f} s decode", file=sys.stderr, flush=True)
    return pts


def curve_clip(path, vfpipe, lambdas, config, frames):
    tmp = tempfile.mkdtemp()
    enc = os.path.join(tmp, "c.mmp")
    tile = config_args(config)
    pts = []
    for lam in lambdas:
        t = time.time()
        out = subprocess.run([vfpipe, "mmp", "encode", "-y", path, "-o", enc, "--lambda", str(lam), "-n", str(frames)] + tile,
                             check=True, capture_output=True, text=True).stderr.strip().splitlines()[-1]
        secs = time.time() - t
        bpp = float(out.split(" bpp")[0].split()[-1])
        psnr = float(out.split("PSNR ")[1].split()[0])
        pts.append({"param": lam, "bpp": bpp, "psnr": psnr, "seconds": secs})
        print(f"  {config} lambda {lam}: {bpp:.4f} bpp {psnr:.2f} dB {secs:.1f} s", file=sys.stderr, flush=True)
    os.remove(enc)
    return pts


def tables(results):
    for name, r in results.items():
        base = r.get("untiled") or next(iter(r.values()))
        base_name = "untiled" if "untiled" in r else next(iter(r))
        print(f"\n{name}:\n\n| tiling | BD-PSNR vs {base_name} | BD-rate vs {base_name} | encode s (min..max) | "
              "points (bpp/dB) |")
        print("|---|---|---|---|---|")
        for cfg, pts in r.items():
            bd = ev.bd_psnr(pts, base) if cfg != base_name else None
            br = bd_rate(pts, base) if cfg != base_name else None
            secs = [p["seconds"] for p in pts]
            print(f"| {cfg} | {'%+.3f dB' % bd[0] if bd else '-'} | {'%+.1f%%' % br if br is not None else '-'} | "
                  f"{min(secs):.1f}..{max(secs):.1f} | "
                  + ", ".join(f"{p['bpp']:.3f}/{p['psnr']:.2f}" for p in sorted(pts, key=lambda p: p['bpp'])) + " |")
    # Mean over the images per config.
    cfgs = list(next(iter(results.values())).keys())
    if len(results) < 2 or "untiled" not in cfgs:
        return
    print("\n| tiling | mean BD-PSNR | mean BD-rate |\n|---|---|---|")
    for cfg in cfgs[1:]:
        bds = [ev.bd_psnr(r[cfg], r["untiled"]) for r in results.values()]
        brs = [bd_rate(r[cfg], r["untiled"]) for r in results.values()]
        if all(bds) and all(b is not None for b in brs):
            print(f"| {cfg} | {np.mean([b[0] for b in bds]):+.3f} dB | {np.mean(brs):+.1f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vfpipe", default=os.path.join(here, "..", "build", "vfpipe"))
    ap.add_argument("--lambdas", default="20,40,60,100,150")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--only", default="camera,astronaut,coffee")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--json")
    ap.add_argument("--from", dest="from_json")
    ap.add_argument("--clip", help="a Y4M clip instead of the photographs")
    ap.add_argument("--frames", type=int, default=1, help="frames of --clip to code")
    ap.add_argument("--save-npz", help="write the selected crops to this file and stop")
    ap.add_argument("--npz", help="read the crops from this file (--save-npz) instead of scikit-image")
    a = ap.parse_args()
    if a.from_json:
        tables(json.load(open(a.from_json)))
        return
    lambdas = [float(x) for x in a.lambdas.split(",")]
    if a.clip:
        name = f"{os.path.basename(a.clip)} ({a.frames} frames)"
        results = {name: {}}
        for cfg in a.configs.split(","):
            results[name][cfg] = curve_clip(a.clip, a.vfpipe, lambdas, cfg, a.frames)
            if a.json:
                json.dump(results, open(a.json, "w"), indent=1)
        tables(results)
        return
    if a.npz:
        with np.load(a.npz) as z:
            imgs = {k: z[k] for k in z.files if k.split(" ")[0] in a.only.split(",")}
    else:
        imgs = {k: v for k, v in ev.images(a.size).items() if k.split(" ")[0] in a.only.split(",")}
    if a.save_npz:
        np.savez_compressed(a.save_npz, **imgs)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, img in imgs.items():
            print(f"{name} {img.shape[1]}x{img.shape[0]}", file=sys.stderr, flush=True)
            results[name] = {cfg: curve(img, tmp, a.vfpipe, lambdas, cfg) for cfg in a.configs.split(",")}
            if a.json:
                json.dump(results, open(a.json, "w"), indent=1)
    tables(results)


if __name__ == "__main__":
    main()
