#!/usr/bin/env python3
"""Checks that every #include follows vfpipe's layers (docs/architecture.md#layers).

Each top-level folder is one layer and one library; a file may include headers of its own
folder and of the folders listed for it below, nothing above. Run from anywhere:
    python3 tests/check_layers.py [SOURCE_DIR]
Exit status 1 with one line per include against the direction.
"""
import pathlib
import re
import sys

# folder -> the folders it may include (its own is always allowed)
ALLOWED = {
    "core": set(),
    "codecs": {"core"},
    "cpu": {"core"},
    "cuda": {"core", "cpu", "codecs"},
    "stages": {"core", "cpu", "cuda", "codecs"},
    "pipeline": {"core", "cpu", "cuda", "codecs", "stages"},
    "io": {"core", "cpu", "cuda", "codecs", "stages", "pipeline"},
    "display": {"core", "cpu", "cuda", "codecs", "stages", "pipeline", "io"},
    "batch": {"core"},
}
# Above every layer: may include anything.
TOP = {"apps", "tests"}
SUFFIXES = {".hpp", ".cpp", ".cu", ".inc", ".h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    bad = []
    checked = 0
    for layer, allowed in ALLOWED.items():
        for f in sorted((root / layer).rglob("*")):
            if f.suffix not in SUFFIXES:
                continue
            checked += 1
            text = f.read_text(errors="replace")
            for m in INCLUDE.finditer(text):
                target = m.group(1).split("/")[0]
                if "/" not in m.group(1):
                    continue  # generated or same-folder headers
                if target == layer or target in allowed:
                    continue
                if target in ALLOWED or target in TOP:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{f.relative_to(root)}:{line}: {layer}/ may not include {m.group(1)} "
                               f"({layer} sits below {target})")
    for b in bad:
        print(b)
    print(f"check_layers: {checked} files, {len(bad)} includes against the layers")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
