#!/bin/bash
# `vfpipe batch --slurm` against a real Slurm: this test starts munged, slurmctld and slurmd
# (Debian's packages) on this machine with a one-node configuration in a temporary folder,
# submits a 4-task array of 200 clips (one corrupt) through vfpipe, cancels it midway,
# submits it again and waits: every good clip is done exactly once, the corrupt one is
# reported, nothing partial stays, the merged report lists every item. Then it stops the
# daemons it started.
#
# Needs root (slurmd runs the tasks as the submitting user, here root) and the packages
# slurmctld, slurmd, slurm-client and munge. Without them it exits 77 (ctest: skipped),
# unless VFPIPE_REQUIRE_SLURM=1 (CI), where a missing piece is a failure.
#
# Usage: tests/slurm_batch_test.sh VFPIPE_BINARY
set -u
VFPIPE=$(readlink -f "${1:?usage: $0 VFPIPE_BINARY}")
skip() {
  echo "SKIP: $*"
  if [ "${VFPIPE_REQUIRE_SLURM:-0}" = 1 ]; then exit 1; fi
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root (slurmd must run the tasks)"
for p in munged slurmctld slurmd sbatch squeue; do
  command -v "$p" >/dev/null || skip "$p is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done

T=$(mktemp -d /tmp/vfpipe-slurm.XXXXXX)
chmod 755 "$T"
PIDS=()
cleanup() {
  local rc=$?
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  if [ $rc != 0 ]; then
    echo "---- slurmctld log"; tail -20 "$T/log/slurmctld.log" 2>/dev/null
    echo "---- slurmd log"; tail -20 "$T/log/slurmd.log" 2>/dev/null
    for f in "$T"/work/out/slurm-*.out; do [ -f "$f" ] && { echo "---- $f"; tail -20 "$f"; }; done
  fi
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

# ---- munge: its own key, socket and files in the temporary folder
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/log" "$T/work"
chmod 700 "$T/munge"
head -c 1024 /dev/urandom >"$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
munged --force --key-file="$T/munge/munge.key" --socket="$T/munge/munge.sock" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" --seed-file="$T/munge/seed" ||
  fail "munged did not start"

# ---- a one-node cluster on free ports
H=$(hostname)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(port)
SLURMD_PORT=$(port)
cat >"$T/slurm.conf" <<EOF
ClusterName=vfpipetest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$H NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=vfptest Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$T/slurm.conf"
slurmctld || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
for _ in $(seq 1 60); do
  sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
  sleep 0.5
done
sinfo -h -o %t | grep -qE '^(idle|mix|alloc)' || fail "the node did not come up: $(sinfo 2>&1)"

# ---- inputs: 200 short clips of mixed sizes (Y4M, written directly), one corrupt
cd "$T/work"
python3 - <<'EOF' || fail "making the clips"
import os
for i in range(200):
    w, h, n = 16 + 8 * (i % 9), 8 + 8 * (i % 5), 2 + i % 7
    d = "clips/%s" % ("a" if i % 2 == 0 else "b")
    os.makedirs(d, exist_ok=True)
    with open("%s/clip%03d.y4m" % (d, i), "wb") as f:
        f.write(b"YUV4MPEG2 W%d H%d F25:1 Ip A1:1 C444\n" % (w, h))
        for k in range(n):
            f.write(b"FRAME\n" + bytes((x * 7 + i * 13 + k * 11) & 255 for x in range(3 * w * h)))
with open("clips/a/corrupt.y4m", "wb") as f:
    f.write(b"YUV4MPEG2 W0 H-5 this is not a clip\n")
EOF
BATCH=("$VFPIPE" batch clips -f "median=radius=1" -o 'out/{relpath}/{stem}.y4m' --device cpu --retries 0
  --slurm --partition vfptest --shards 4)

# ---- submitted, then cancelled midway (scancel: SIGTERM to the running task)
job=$("${BATCH[@]}" --array-max 1 2>submit1.err) || {
  cat submit1.err
  fail "submission"
}
grep -q "array=0-3%1" out/vfpipe-batch.sbatch || fail "the script is not a 4-task array"
for _ in $(seq 1 1200); do  # the first task has started (its ledger exists): cancel
  ls out/vfpipe-batch.shard-*.jsonl >/dev/null 2>&1 && break
  sleep 0.02
done
scancel "$job" || fail "scancel"
for _ in $(seq 1 200); do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
  sleep 0.1
done
[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "job $job did not end after scancel"
done1=$(cat out/vfpipe-batch.shard-*.jsonl 2>/dev/null | grep -c '"status":"done"')
abandoned=$(cat out/slurm-*.out 2>/dev/null | grep -c "abandoning")
echo "cancelled after $done1 items were done ($abandoned task(s) abandoned their running items)"
[ "$done1" -lt 200 ] || fail "not cancelled midway ($done1 done)"
left=$(find out -name '.vfpipe-part.*')
[ -z "$left" ] || fail "a cancelled task left temporary files: $left"

# ---- submitted again, waited for: the rest is done, the corrupt clip reported
"${BATCH[@]}" --wait >/dev/null 2>submit2.err
rc=$?
cat submit2.err
[ $rc = 1 ] || fail "a batch with a corrupt input should exit 1, got $rc"
for i in 0 1 77 198 199; do
  d=a
  [ $((i % 2)) = 1 ] && d=b
  f=$(printf "%s/clip%03d.y4m" $d "$i")
  "$VFPIPE" run -q -i "clips/$f" -f "median=radius=1" -o ref.y4m -y --device cpu || fail "reference $f"
  cmp -s ref.y4m "out/$f" || fail "out/$f differs from vfpipe run's output"
done
[ -e out/a/corrupt.y4m ] && fail "the corrupt input has a file under its final name"
left=$(find out -name '.vfpipe-part.*' -o -name '*.partial.*')
[ -z "$left" ] || fail "partial files were left: $left"
nl=$(ls out/vfpipe-batch.shard-*-of-4.jsonl | wc -l)
[ "$nl" = 4 ] || fail "expected 4 shard ledgers, found $nl"
python3 - <<'EOF' || fail "ledgers and merged report"
import collections, glob, json
done = collections.Counter()
for f in glob.glob("out/vfpipe-batch.shard-*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        if r["status"] == "done":
            done[r["input"]] += 1
assert len(done) == 200, len(done)
twice = [k for k, v in done.items() if v != 1]
assert not twice, twice
r = json.load(open("out/vfpipe-batch.report.json"))
t = r["totals"]
assert t["items"] == 201 and t["done"] == 200 and t["failed"] == 1 and t["missing"] == 0, t
bad = [i for i in r["items"] if i["status"] == "failed"]
assert bad[0]["input"].endswith("corrupt.y4m"), bad
assert {i.get("shard") for i in r["items"]} == {"0/4", "1/4", "2/4", "3/4"}
EOF
echo "PASS: a 4-task Slurm array cancelled midway and submitted again: 200 clips done once each, the corrupt one reported"
