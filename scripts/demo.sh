#!/usr/bin/env bash
# make demo: what score does today, on a virtual cluster of this machine.
#
#   1. bring up 4 nodes with 2 NICs each, links limited to 1 Gbit/s;
#   2. show the cluster;
#   3. prove every node reaches every other node on every network;
#   4. run a PM program (4 processes) inside node n1;
#   5. run pmcheck over the whole cluster (shm and udp mixed);
#   6. take the cluster down, whatever happened before.
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

step "bringing up a virtual cluster: $NODES nodes x $NICS NICs, 1 Gbit/s links"
"$VCLUSTER" up --name "$NAME" --nodes "$NODES" --nics "$NICS" --rate 1gbit

step "status"
"$VCLUSTER" status --name "$NAME"

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

step "PM across the cluster: 8 processes, 2 per node; shm inside a node, udp over both NICs between nodes"
net0=$("$VCLUSTER" status --name "$NAME" --json | /usr/bin/python3 -c \
  'import json, sys; print(json.load(sys.stdin)["clusters"][0]["networks"][0]["subnet"])')
hosts=$(seq -s, -f "n%g.$NAME:2" 1 $NODES)
env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun --bind-to none --host "$hosts" -n $((NODES * 2)) \
    --mca plm_rsh_agent "$VCLUSTER rsh --name $NAME" --mca oob_tcp_if_include "$net0" \
    "$ROOT/build/bin/pmcheck" --pattern all --count 2000 --sizes 1-20000 --rma --quiet \
  | /usr/bin/python3 -c '
import json, sys
ranks = [json.loads(l) for l in sys.stdin if l.startswith("{")]
ok = all(r["ok"] for r in ranks)
n = sum(r["received"] for r in ranks)
print("pmcheck: %d ranks, all-to-all, %d messages verified exactly once and in order: %s"
      % (len(ranks), n, "ok" if ok else "FAILED"))
sys.exit(0 if ok and ranks else 1)'

echo
echo "demo complete: all $((NODES * (NODES - 1) * NICS)) (node, network) pairs reachable; PM ran on n1 and across all nodes"
