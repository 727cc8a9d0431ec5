#!/bin/bash
# `vfpipe batch --slurm` against a real Slurm: this test starts munged, slurmctld and slurmd
# (Debian's packages) on this machine with a one-node configuration in a temporary folder,
# submits a 4-task array through vfpipe, waits for it, checks every output, the merged
# report, a re-submission that does nothing twice, and stops the daemons it started.
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

# ---- inputs: 8 clips of mixed sizes (Y4M: no codec needed), one of them damaged
cd "$T/work"
mkdir -p clips/a clips/b
for i in 0 1 2 3 4 5 6 7; do
  d=clips/a; [ $((i % 2)) = 1 ] && d=clips/b
  "$VFPIPE" run -q -i "synthetic=size=$((32 + 16 * i))x$((24 + 8 * i)):frames=$((3 + i))" -o "$d/clip$i.y4m" ||
    fail "making clip $i"
done
head -c 50000 clips/a/clip6.y4m >clips/a/broken.y4m  # ends inside its 4th frame

"$VFPIPE" batch clips -f "median=radius=1" -o 'out/{relpath}/{stem}.y4m' --device cpu \
  --slurm --partition vfptest --shards 4 --wait >submit.out 2>submit.err
rc=$?
cat submit.err
[ $rc = 1 ] || fail "the submission with a damaged input should exit 1, got $rc"
grep -q "array=0-3" out/vfpipe-batch.sbatch || fail "the script is not a 4-task array"
n=$(ls out/slurm-*_*.out 2>/dev/null | wc -l)
[ "$n" = 4 ] || fail "expected 4 task logs, found $n"
for i in 0 1 2 3 4 5 6 7; do
  d=a; [ $((i % 2)) = 1 ] && d=b
  [ -f "out/$d/clip$i.y4m" ] || fail "out/$d/clip$i.y4m is missing"
  # Same frames as a plain run of the same chain.
  "$VFPIPE" run -q -i "clips/$d/clip$i.y4m" -f "median=radius=1" -o "ref$i.y4m" --device cpu || fail "reference $i"
  cmp -s "ref$i.y4m" "out/$d/clip$i.y4m" || fail "out/$d/clip$i.y4m differs from vfpipe run's output"
done
[ -f out/a/broken.y4m ] && fail "the damaged input has a file under its final name"
[ -f out/a/broken.partial.y4m ] || fail "the damaged input's frames were not kept as broken.partial.y4m"
ls out/*/.vfpipe-part.* 2>/dev/null && fail "temporary files were left"
# Each shard wrote its own ledger; the merged report has every item once.
nl=$(ls out/vfpipe-batch.shard-*-of-4.jsonl | wc -l)
[ "$nl" = 4 ] || fail "expected 4 shard ledgers, found $nl"
python3 - <<'EOF' || fail "merged report"
import json
r = json.load(open("out/vfpipe-batch.report.json"))
t = r["totals"]
assert t["items"] == 9 and t["done"] == 8 and t["failed"] == 1 and t["missing"] == 0, t
bad = [i for i in r["items"] if i["status"] == "failed"]
assert bad[0]["input"].endswith("broken.y4m") and "partial" in bad[0], bad
shards = {i.get("shard") for i in r["items"]}
assert shards == {"0/4", "1/4", "2/4", "3/4"}, shards
EOF

# ---- the same submission again: done items are skipped, only the damaged one is tried
"$VFPIPE" batch clips -f "median=radius=1" -o 'out/{relpath}/{stem}.y4m' --device cpu \
  --slurm --partition vfptest --shards 4 --wait >/dev/null 2>submit2.err
python3 - <<'EOF' || fail "second submission"
import collections, glob, json
done = collections.Counter()
for f in glob.glob("out/vfpipe-batch.shard-*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        if r["status"] == "done":
            done[r["input"]] += 1
assert len(done) == 8 and set(done.values()) == {1}, done
EOF
echo "PASS: 4-task Slurm array, 8 clips done once each, the damaged one reported and kept as .partial"
