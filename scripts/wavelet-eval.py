#!/usr/bin/python3
"""Denoising quality of vfpipe's `wavelet` stage against scikit-image's denoise_wavelet.

Natural photographs shipped with scikit-image (8-bit gray), Gaussian noise of sigma 10, 20,
30 (fixed seed), rounded and clipped to 8 bits. Both denoisers get the same noisy image,
wavelet, levels (scikit-image's default rule, which is also ours), BayesShrink, soft, and
estimate sigma themselves. vfpipe runs as a program (Y4M through a pipe, CPU backend
unless --device says otherwise), twice: with 8-bit output, and with 16-bit output
(`format=gray16le,wavelet=...`, Cmono16 out, read as value / 257), which keeps its float
result unrounded. scikit-image's output is float (unclipped, as it returns it for float
input): the table gives its PSNR as is and rounded to 8 bits.

    /usr/bin/python3 scripts/wavelet-eval.py [--vfpipe build/vfpipe] [--device cpu]
                                             [--json docs/results/wavelet_quality.json]
Prints a Markdown table (docs/wavelet.md keeps the last one).
"""
import argparse
import json
import subprocess
import sys

import numpy as np
import pywt
import skimage
from skimage import color, data
from skimage.restoration import denoise_wavelet

IMAGES = {
    "camera": lambda: data.camera(),
    "astronaut": lambda: color.rgb2gray(data.astronaut()),
    "coffee": lambda: color.rgb2gray(data.coffee()),
    "chelsea": lambda: color.rgb2gray(data.chelsea()),
    "rocket": lambda: color.rgb2gray(data.rocket()),
}


def to_u8(img):
    img = np.asarray(img)
    if img.dtype != np.uint8:
        img = np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)
    return img


def psnr(ref, x):
    mse = np.mean((ref.astype(np.float64) - x.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0 ** 2 / mse)


def y4m_gray(img):
    h, w = img.shape
    return b"YUV4MPEG2 W%d H%d F25:1 Ip A1:1 Cmono\n" % (w, h) + b"FRAME\n" + img.tobytes()


def read_y4m_gray(buf, w, h):
    """8-bit (Cmono) or 16-bit (Cmono16, returned as value / 257) gray frame."""
    header = buf[:buf.index(b"\n")]
    frame = buf.index(b"FRAME\n") + 6
    if b" Cmono16" in header:
        return np.frombuffer(buf[frame:frame + 2 * w * h], dtype="<u2").reshape(h, w) / 257.0
    return np.frombuffer(buf[frame:frame + w * h], dtype=np.uint8).reshape(h, w)


def vfpipe_denoise(exe, device, img, filters):
    h, w = img.shape
    r = subprocess.run([exe, "run", "-i", "-", "-o", "-", "-f", filters, "--device", device, "-q", "--no-progress"],
                       input=y4m_gray(img), capture_output=True, check=False)
    if r.returncode != 0:
        sys.exit("vfpipe failed: " + r.stderr.decode())
    return read_y4m_gray(r.stdout, w, h)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vfpipe", default="build/vfpipe")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--wavelets", default="db4,sym8,haar")
    ap.add_argument("--sigmas", default="10,20,30")
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = np.random.default_rng(2026)
    rows = []
    print("| image | size | wavelet | levels | sigma | noisy dB | vfpipe 8-bit dB | vfpipe 16-bit dB | skimage dB (float) "
          "| skimage dB (8-bit) | vfpipe 8-bit - skimage 8-bit | vfpipe 16-bit - skimage float |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, load in IMAGES.items():
        clean = to_u8(load())
        h, w = clean.shape
        for sigma in [float(s) for s in a.sigmas.split(",")]:
            noisy = np.clip(np.round(clean + rng.normal(0, sigma, clean.shape)), 0, 255).astype(np.uint8)
            for wav in a.wavelets.split(","):
                levels = max(pywt.dwtn_max_level(clean.shape, wav) - 3, 1)
                filt = "wavelet=%s:levels=%d:method=bayesshrink:mode=soft" % (wav, levels)
                ours = vfpipe_denoise(a.vfpipe, a.device, noisy, filt)
                ours16 = vfpipe_denoise(a.vfpipe, a.device, noisy, "format=gray16le," + filt)
                sk = denoise_wavelet(noisy / 255.0, wavelet=wav, method="BayesShrink", mode="soft",
                                     wavelet_levels=levels) * 255.0
                r = {"image": name, "size": "%dx%d" % (w, h), "wavelet": wav, "levels": levels, "sigma": sigma,
                     "psnr_noisy": psnr(clean, noisy), "psnr_vfpipe": psnr(clean, ours),
                     "psnr_vfpipe16": psnr(clean, ours16),
                     "psnr_skimage": psnr(clean, sk),
                     "psnr_skimage_8bit": psnr(clean, np.clip(np.round(sk), 0, 255))}
                rows.append(r)
                print("| %s | %s | %s | %d | %g | %.2f | %.3f | %.3f | %.3f | %.3f | %+.4f | %+.4f |" % (
                    name, r["size"], wav, levels, sigma, r["psnr_noisy"], r["psnr_vfpipe"], r["psnr_vfpipe16"],
                    r["psnr_skimage"], r["psnr_skimage_8bit"], r["psnr_vfpipe"] - r["psnr_skimage_8bit"],
                    r["psnr_vfpipe16"] - r["psnr_skimage"]), flush=True)
    print()
    for wav in a.wavelets.split(","):
        d = [r["psnr_vfpipe16"] - r["psnr_skimage"] for r in rows if r["wavelet"] == wav]
        d8 = [r["psnr_vfpipe"] - r["psnr_skimage_8bit"] for r in rows if r["wavelet"] == wav]
        print("%s: vfpipe 16-bit - skimage float: worst %+.4f, mean %+.4f dB, >= 0 in %d/%d; "
              "8-bit vs 8-bit: worst %+.4f, mean %+.4f dB" % (wav, min(d), sum(d) / len(d),
                                                             sum(x >= 0 for x in d), len(d), min(d8), sum(d8) / len(d8)))
    print("(scikit-image %s, PyWavelets %s)" % (skimage.__version__, pywt.__version__))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
