#!/usr/bin/env bash
# NVDEC in batch: 24 copies of a 1080p H.264 clip (.bench-data/h264_1080p_120f.mp4, made with
# ffmpeg's testsrc2 + noise, libx264 -crf 23) decoded alone (-f null) and through the 3-stage
# chain, on NVDEC and on the CPU decoder, with vfpipe batch. Needs a vfpipe with libav (on the
# GPU host: .ff/, scripts/build-device-ffmpeg.sh). Writes tables to stdout.
#   VFPIPE=build-device/vfpipe scripts/nvdec-bench.sh [CLIP]
set -euo pipefail
cd "$(dirname "$0")/.."
export VFPIPE=${VFPIPE:-build-device/vfpipe}
export CLIP=${1:-.bench-data/h264_1080p_120f.mp4}
B=scripts/batch-bench.sh
D=/tmp/vfpipe-nvdec-bench
CH3=median=radius=2,conv=gauss:size=5,wavelet=db4:levels=3
echo "## decoding alone (-f null): NVDEC"
CHAIN=null EXTRA="--hwaccel cuda" SKIP_SINGLE=1 JOBS="1 2 4 8" bash $B $D 24 1920x1080 120 | tail -5
echo "## decoding alone (-f null): the CPU decoder (16 cores)"
CHAIN=null EXTRA="--hwaccel none" SKIP_SINGLE=1 JOBS="1 4 8" bash $B $D 24 1920x1080 120 | tail -4
echo "## 3-stage chain, NVDEC"
CHAIN=$CH3 EXTRA="--hwaccel cuda" JOBS="1 2 4" bash $B $D 24 1920x1080 120 | tail -5
echo "## 3-stage chain, the CPU decoder"
CHAIN=$CH3 EXTRA="--hwaccel none" SKIP_SINGLE=1 JOBS="4" bash $B $D 24 1920x1080 120 | tail -2
echo "## 3-stage chain, NVDEC, libx264 -preset ultrafast outputs (the CPU encoder's bound)"
OUTPUT=mp4 CHAIN=$CH3 EXTRA="--hwaccel cuda -c:v libx264 -preset ultrafast" SKIP_SINGLE=1 JOBS="4 8" \
  bash $B $D 24 1920x1080 120 | tail -3
