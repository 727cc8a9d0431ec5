# Sourced by the device-side MMP scripts (mmp-bench.sh, mmp-switch-ab.sh, mmp-builds-ab.sh):
# T, a scratch folder removed on exit, and PY, a python3 with numpy (the device's own, or
# the system's where a virtual environment's lacks it).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=python3
$PY -c "import numpy" 2> /dev/null || PY=/usr/bin/python3
