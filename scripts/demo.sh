#!/usr/bin/env bash
# make demo: what score does today, on a virtual cluster of this machine.
#
#   1. bring up 4 nodes with 2 NICs each, links limited to 1 Gbit/s, with
#      munged and scored (master on the host, an agent per node);
#   2. show the cluster and scored's view of its nodes;
#   3. prove every node reaches every other node on every network;
#   4. run a PM program (4 processes) inside node n1 with mpirun;
#   5. through scrun: a PM ping-pong between two nodes, pmcheck over the whole
#      cluster (shm and udp mixed), and an Open MPI program on 4x2 processes;
#   6. two pmcheck jobs on the same nodes, gang-scheduled, and the matrix;
#   7. take the cluster down, whatever happened before.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VCLUSTER="$ROOT/provisioning/vcluster/vcluster"
NAME=${DEMO_CLUSTER:-demo}
NODES=4
NICS=2

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "make demo: the virtual cluster needs root (network namespaces); run it as root" >&2
  exit 1
fi

cleanup() {
  step "taking the virtual cluster down"
  "$VCLUSTER" down --name "$NAME"
}
trap cleanup EXIT

step "bringing up a virtual cluster: $NODES nodes x $NICS NICs, 1 Gbit/s links, with scored"
"$VCLUSTER" up --name "$NAME" --nodes "$NODES" --nics "$NICS" --rate 1gbit --with-score
eval "$("$VCLUSTER" env --name "$NAME")"
SCRUN="$ROOT/build/bin/scrun"

step "status"
"$VCLUSTER" status --name "$NAME"
echo
"$ROOT/build/bin/scorectl" nodes

step "reachability: every node pings every other node on every network"
failures=0
printf '%-6s' "from"
for to in $(seq 1 $NODES); do
  for net in $(seq 0 $((NICS - 1))); do
    printf '%-10s' "n$to-net$net"
  done
done
echo
for from in $(seq 1 $NODES); do
  printf '%-6s' "n$from"
  for to in $(seq 1 $NODES); do
    for net in $(seq 0 $((NICS - 1))); do
      if [ "$from" = "$to" ]; then printf '%-10s' "-"; continue; fi
      if "$VCLUSTER" exec --name "$NAME" "n$from" -- ping -c1 -W1 -q "n$to-net$net" >/dev/null 2>&1; then
        printf '%-10s' "ok"
      else
        printf '%-10s' "FAIL"; failures=$((failures + 1))
      fi
    done
  done
  echo
done
if [ "$failures" -ne 0 ]; then
  echo "make demo: $failures unreachable (node, network) pairs" >&2
  exit 1
fi

step "PM: 4 processes on node n1 pass a token round a ring over shared memory"
"$VCLUSTER" exec --name "$NAME" n1 -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -n 4 --oversubscribe "$ROOT/build/bin/pm-ring-pass"
"$VCLUSTER" exec --name "$NAME" n1 -- "$ROOT/build/bin/pminfo" | head -4

step "scrun: PM ping-pong between n1 and n2 over udp (1 Gbit/s link)"
"$SCRUN" -nodes=2x1 "$ROOT/build/bin/pmbench" --device udp --test pingpong --sizes 8,1024,65536 --reps 3

step "scrun: pmcheck over the cluster, 8 processes, 2 per node; shm inside a node, udp over both NICs between nodes"
"$SCRUN" -nodes=$NODES"x2" "$ROOT/build/bin/pmcheck" --pattern all --count 2000 --sizes 1-20000 --rma --quiet \
  | /usr/bin/python3 -c '
import json, sys
ranks = [json.loads(l) for l in sys.stdin if l.startswith("{")]
ok = all(r["ok"] for r in ranks)
n = sum(r["received"] for r in ranks)
print("pmcheck: %d ranks, all-to-all, %d messages verified exactly once and in order: %s"
      % (len(ranks), n, "ok" if ok else "FAILED"))
sys.exit(0 if ok and ranks else 1)'

step "scrun: an Open MPI program (Debian's mpicc, nothing of PM in it) on ${NODES}x2 processes, over PM"
net0=$("$VCLUSTER" status --name "$NAME" --json | /usr/bin/python3 -c \
  'import json, sys; print(json.load(sys.stdin)["clusters"][0]["networks"][0]["subnet"])')
work=$(mktemp -d)
trap 'rm -rf "$work"; cleanup' EXIT
mpicc -O2 -o "$work/mpi_ring" "$ROOT/tests/programs/mpi_ring.c"
chmod 755 "$work"
# scrun's default --mpi pm: Open MPI's messages go over PM through the
# libfabric provider pm (docs/mpi/guide.md).
(cd "$work" && "$SCRUN" -nodes=$NODES"x2" --label \
  --env OMPI_MCA_oob_tcp_if_include="$net0" \
  --env OMPI_ALLOW_RUN_AS_ROOT=1 --env OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ./mpi_ring)

step "the same with Open MPI's own transports (scrun --mpi own: vader within a node, tcp between)"
(cd "$work" && "$SCRUN" --mpi own -nodes=$NODES"x2" --label \
  --env OMPI_MCA_btl=self,vader,tcp --env OMPI_MCA_btl_tcp_if_include="$net0" \
  --env OMPI_ALLOW_RUN_AS_ROOT=1 --env OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ./mpi_ring)

step "gang scheduling: two jobs on the same 4 nodes take turns (network preemption at every switch)"
for j in a b; do
  "$SCRUN" -nodes=$NODES"x2" "$ROOT/build/bin/pmcheck" --pattern all --count 20000 --sizes 8-512 --quiet \
    > "$work/gang-$j.out" &
  sleep 0.5
done
sleep 2
"$ROOT/build/bin/scorectl" matrix
wait
cat "$work"/gang-*.out | /usr/bin/python3 -c '
import json, sys
ranks = [json.loads(l) for l in sys.stdin if l.startswith("{")]
ok = all(r["ok"] for r in ranks) and len(ranks) == 16
print("both jobs: %d ranks, every message verified: %s; retransmissions: %d"
      % (len(ranks), "ok" if ok else "FAILED", sum(r["retransmits"] for r in ranks)))
sys.exit(0 if ok else 1)'
"$ROOT/build/bin/scorectl" matrix | tail -1

step "scorectl: the jobs scored ran"
"$ROOT/build/bin/scorectl" jobs --all

echo
echo "demo complete: all $((NODES * (NODES - 1) * NICS)) (node, network) pairs reachable; PM ran on n1 and, through scrun, across all nodes; Open MPI ran through scrun; two jobs shared the nodes by gang scheduling"
