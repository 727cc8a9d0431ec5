#!/usr/bin/python3
"""Outside references for the wavelet stage's tests (tests/test_wavelet.cpp runs this).

Writes JSON with, for random 8-bit images of odd and tiny sizes:
  dwt:     pywt.wavedec2 coefficients for every vfpipe wavelet x {symmetric, periodization}
  denoise: scikit-image's denoise_wavelet output (x255) for a few wavelet/method/mode sets

    /usr/bin/python3 tests/pywt_reference.py OUT.json
Exit status 3 when PyWavelets or scikit-image is missing (the test then skips or fails).
"""
import json
import sys

try:
    import numpy as np
    import pywt
    from skimage.restoration import denoise_wavelet
    from scipy.stats import norm
except ImportError as e:  # noqa: F841
    sys.stderr.write("pywt_reference.py: %s\n" % e)
    sys.exit(3)

WAVELETS = [("haar", "haar")] + [(f"db{i}", f"db{i}") for i in range(2, 9)] + \
           [(f"sym{i}", f"sym{i}") for i in range(2, 9)] + [("bior2.2", "bior2.2"), ("cdf97", "bior4.4")]
SIZES = [(1, 1), (3, 7), (13, 9), (37, 22)]  # (w, h)


def flat(a):
    return [float(x) for x in np.asarray(a, dtype=np.float64).ravel()]


def main():
    rng = np.random.default_rng(20261122)
    out = {"pywt": pywt.__version__, "dwt": [], "denoise": []}
    for w, h in SIZES:
        img = rng.integers(0, 256, size=(h, w)).astype(np.float64)
        for ours, theirs in WAVELETS:
            wav = pywt.Wavelet(theirs)
            maxlev = pywt.dwtn_max_level((h, w), wav)
            for mode in ("symmetric", "periodization"):
                levels = min(max(maxlev, 1), 3)
                c = pywt.wavedec2(img, wav, mode=mode, level=levels)
                details = [[flat(d[0]), flat(d[1]), flat(d[2])] for d in reversed(c[1:])]
                out["dwt"].append({"wavelet": ours, "mode": mode, "w": w, "h": h, "levels": levels,
                                   "input": flat(img), "approx": flat(c[0]), "details": details})
    # Noisy smooth images for the denoiser: a gradient plus blobs plus Gaussian noise.
    for (w, h) in [(61, 47), (128, 96)]:
        yy, xx = np.mgrid[0:h, 0:w]
        clean = 100 + 0.8 * xx + 40 * np.sin(yy / 7.0) * np.cos(xx / 9.0)
        noisy = np.clip(np.round(clean + rng.normal(0, 15, size=clean.shape)), 0, 255).astype(np.uint8)
        for wav, method, mode, levels in [("db4", "BayesShrink", "soft", 2), ("haar", "BayesShrink", "soft", 3),
                                          ("sym8", "VisuShrink", "soft", 1), ("db2", "BayesShrink", "hard", 2),
                                          ("bior2.2", "VisuShrink", "hard", 2)]:
            # The MAD noise estimate on pywt's finest diagonal band of the 8-bit image, zeros
            # included (scikit-image's _sigma_est_dwt skips exact zeros: see docs/wavelet.md),
            # given to denoise_wavelet explicitly so that both use the same sigma.
            dd1 = pywt.wavedec2(noisy.astype(np.float64), wav, level=1)[-1][2]
            sigma = float(np.median(np.abs(dd1)) / norm.ppf(0.75))
            den = denoise_wavelet(noisy / 255.0, sigma=sigma / 255.0, wavelet=wav, method=method, mode=mode,
                                  wavelet_levels=levels)
            out["denoise"].append({"wavelet": wav, "method": method.lower(), "mode": mode, "levels": levels,
                                   "w": w, "h": h, "input": [int(v) for v in noisy.ravel()],
                                   "sigma": sigma, "expected": flat(den * 255.0)})
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
