"""Command line of vcluster: argument parsing and dispatch to the modules."""

import argparse
import json
import os
import shlex
import signal
import sys

from . import (aptproxy, build, enter, image, inventory, log, naming, rsh, score,
               shape as shape_mod, slurm, status, system, teardown)
from .addressing import parse_subnet
from .errors import VclusterError
from .shape import Shape

PROG = "vcluster"

DESCRIPTION = """\
Play a whole cluster on one Linux machine.

Each node is a network namespace with its own host name (nI) and its own
/etc/hosts; each NIC is a veth pair into one Linux bridge per network, so each
network is a separate switch.  Links can be rate-limited with tc and given an
MTU.  The host has an address on every bridge, so programs in the root
namespace (mpirun, Prometheus, ...) reach the nodes directly.

All commands except --help must run as root."""

EPILOG = """\
examples:
  vcluster up --nodes 4 --nics 2 --rate 1gbit     # 4 nodes, 2 networks, GbE-like links
  vcluster exec n1 -- ip -br addr                   # run a command on node n1
  vcluster rsh n2 'hostname; getent hosts n1-net1'  # ssh-like, for launchers
  mpirun --host n1,n2 --mca plm_rsh_agent "vcluster rsh" hostname
  vcluster status
  vcluster down

  vcluster up --nodes 4 --with-score               # plus munged everywhere, scored master + agents
  eval "$(vcluster env)"; scrun -nodes=4x1 hostname
  vcluster up --nodes 4 --with-slurm               # plus munged, slurmctld and a slurmd per node
  eval "$(vcluster env)"; srun -N4 hostname

State: /run/score/vcluster/NAME.json and /run/score/vcluster/NAME/.  Documentation: docs/admin/vcluster.md."""

UP_HELP = """\
Create cluster NAME with N nodes (n1..nN) and K networks, or confirm that it is
already up with the same shape (then nothing changes).  A cluster of that name
with another shape is an error: take it down first.

Network K of the cluster is a /24 of the cluster's /16 (by default the first of
10.250.0.0/16 .. 10.255.0.0/16 that overlaps no route of the host and no other
cluster): node nI has address .I on every network, the host's end of each bridge
has .254.  Inside nodes, nI resolves to its network-0 address, nI-netK to its
network-K address; nI.NAME and nI-netK.NAME work too.  The same names are added
to the host's /etc/hosts between '# BEGIN vcluster NAME' and '# END vcluster NAME'.

If anything fails, whatever was created is removed again.

--with-munge starts one munged per node (inside the node) and one for the host,
all with one key made for the cluster.  --with-score does that and starts the
scored master on the host and a scored agent in every node, then waits until
every node is up (see 'vcluster score-up --help').  Both also work on a
cluster that is already up; running services are left alone.

--with-slurm (alone, or with --with-score or --with-munge) starts munged if it
does not run yet, then slurmctld on the host and one slurmd per node, and
waits until every node is idle (see 'vcluster slurm-up --help').

--rootfs gives every node a root file system of its own and systemd as its
PID 1: the node image (see 'vcluster image --help', built first if needed)
through an overlay whose upper layer is /var/lib/score/vcluster/NAME/nI/.
Each node has its own host keys and sshd; the cluster's key
(/run/score/vcluster/NAME/ssh/id_ed25519) and root's public keys on the host
are authorised.  apt on the nodes goes through apt-cacher-ng on the host
(port 9142 of the host's network-0 address), which serves Debian's archive
(from the archive the host uses) and the project's repository (--repo,
default build/deb/repo if 'make deb' made one) as
'deb [trusted=yes] http://HOST:9142/score/ ./'.  Nodes have no other route
out.  'vcluster exec' and 'rsh' run commands as root on the node itself;
'vcluster inventory' prints an Ansible inventory.  score is installed on
such nodes from its packages, so --rootfs does not combine with
--with-score, --with-munge or --with-slurm."""

UP_EPILOG = """\
exit status: 0 if the cluster is up (created or already there), 1 on error,
2 on a usage error.  With --json, stdout holds {"changed": BOOL, "cluster": STATE}.

examples:
  vcluster up --nodes 4
  vcluster up --name big --nodes 16 --nics 2 --rate 1gbit --mtu 9000
  vcluster up --nodes 2 --with-score --score-bin target/debug
  vcluster up --nodes 4 --nics 2 --with-score --with-slurm
  vcluster up --name rf --nodes 4 --rootfs       # Debian machines with systemd and sshd"""

IMAGE_HELP = """\
Build the Debian image that root-file-system nodes run (vcluster up --rootfs),
unless an image of the same recipe is already there: Debian bookworm (minbase)
with systemd, openssh-server, python3 and python3-apt, from the archive the
host's apt uses, made by mmdebstrap (Debian package mmdebstrap) in about a
minute.  The image is kept in /var/cache/score/vcluster/images/ under a key
that hashes its recipe (suite, archive, package list), so a changed recipe
builds a new one.  Prints the image's directory."""

IMAGE_EPILOG = """\
exit status: 0 if the image is there (built now or before), 1 on error (no
mmdebstrap, the archive unreachable, not enough disk: nothing is kept).

examples:
  vcluster image                 # build once, then reuse
  vcluster image --list
  vcluster image --rebuild"""

SLURM_UP_HELP = """\
Start Slurm (Debian's slurm-wlm) on cluster NAME, which must be up with MUNGE
running (idempotent): slurmctld on the host, one 'slurmd -D -N nI' per node,
in the node's network and UTS namespaces; then wait until 'sinfo' shows every
node idle.  Every daemon and client reads /run/score/vcluster/NAME/slurm/slurm.conf
(SLURM_CONF, printed by 'vcluster env' and set by 'vcluster exec'); the
partition 'vc' holds every node, whole nodes are allocated (select/linear);
'srun --mpi=pmix' starts PMIx jobs, PM's among them.

With --gang, Slurm gang-schedules by itself (PreemptMode=SUSPEND,GANG, the
smallest time slice it takes, 5 s, and two jobs per node): the baseline that
scored's gang scheduling is measured against.

Only one cluster at a time can run Slurm: the slurmds' cgroups are named
slurm_nI.  Logs: slurm/ctld/slurmctld.log and slurm/nI/slurmd.log under
/run/score/vcluster/NAME/.  Reference: docs/admin/slurm.md."""

SLURM_UP_EPILOG = """\
exit status: 0 if Slurm runs, 1 on error.

examples:
  vcluster slurm-up --name vc
  SLURM_CONF=/run/score/vcluster/vc/slurm/slurm.conf srun -N2 --mpi=pmix build/bin/pmcheck"""

SCORE_UP_HELP = """\
Start MUNGE and score on cluster NAME, which must be up (idempotent):

  - a MUNGE key for the cluster, /run/score/vcluster/NAME/munge.key (0400);
  - one munged per node, inside the node, socket /run/score/vcluster/NAME/nI/munge.socket,
    and one on the host, /run/score/vcluster/NAME/head/munge.socket;
  - unless --munge-only: the configurations scored.toml (master), nI/scored.toml
    (agents) and client.toml; the cgroups <cgroup2>/score-vcluster-NAME/nI; the
    scored master on the host's address of network 0 (port 7100, metrics 7101)
    and 'scored agent' in every node; then it waits until 'scorectl nodes --json'
    shows every node up.

Output and logs go to /run/score/vcluster/NAME/{head,nI}/{scored,munged}.log.
If a service is recorded but no longer runs, the services are restarted.  If
starting fails, the services are stopped again; the logs and the network stay."""

SCORE_UP_EPILOG = """\
exit status: 0 if the services run, 1 on error.

examples:
  vcluster score-up                     # scored from build/bin, else from PATH
  vcluster score-up --score-bin scored/target/debug
  vcluster score-up --munge-only        # munged only (e.g. for Slurm)"""

SCORE_DOWN_HELP = """\
Stop score and MUNGE on cluster NAME (agents, then the master, then munged:
SIGTERM, then SIGKILL after --grace seconds), remove its cgroups and
/run/score/vcluster/NAME/.  The network stays up.  'vcluster down' does this too."""

ENV_HELP = """\
Print the environment for using score on cluster NAME, as shell commands:

  eval "$(vcluster env)"        # then scrun and scorectl on the host reach the cluster

SCORE_CONFIG names client.toml (with --node nI: the node's scored.toml);
MUNGE_SOCKET the munged socket for 'munge -S' and 'unmunge -S'; SCORE_BIN the
directory of scored, scrun and scorectl; SLURM_CONF the cluster's slurm.conf
(when Slurm runs on it); VCLUSTER_NAME the cluster.
'vcluster exec' and 'rsh' set SCORE_CONFIG to the node's configuration by themselves."""

DOWN_HELP = """\
Remove everything cluster NAME consists of: its services (scored agents, the
master, munged; see score-up), every process running in its nodes
(SIGTERM, then SIGKILL after --grace seconds), the holder processes, network
namespaces, veths, bridges, /etc/netns/vcluster-NAME-* directories, the block
in /etc/hosts, the state file, the cgroups and /run/score/vcluster/NAME/.

Objects are found by their names, not only through the state file, so down
also cleans up after a crash or a half-finished up.  Taking down a cluster that
is not up succeeds and says so."""

DOWN_EPILOG = """\
exit status: 0 when nothing of the cluster is left, 1 otherwise.  With --json,
stdout holds {"changed": BOOL, "removed": [NAMES]}."""

EXEC_HELP = """\
Run COMMAND inside node NODE: in its network, UTS (host name) and mount
namespaces (its /etc/hosts, its /sys/class/net).  stdin, stdout, stderr,
signals and the exit status are COMMAND's own; the environment and the working
directory are kept (on a cluster running score, SCORE_CONFIG becomes the
node's configuration unless it names a file of another cluster or elsewhere).
NODE is nI, nI-netK, nI.NAME or an address of the node."""

EXEC_EPILOG = """\
exit status: COMMAND's, or 1 if the node cannot be entered, 126/127 if COMMAND
cannot be run.

examples:
  vcluster exec n1 -- hostname
  vcluster exec --name big n3 -- iperf3 -s -1"""

RSH_HELP = """\
An ssh/rsh stand-in for launchers (Open MPI's mpirun, pdsh, clush, ...).

  vcluster rsh [--name NAME] [SSH OPTIONS] [USER@]NODE [COMMAND WORDS...]

ssh's options before NODE are accepted and ignored (-x, -n, -T, -l USER,
-o OPTION, -p PORT, ...).  As ssh does, the command words are joined with
spaces and run with /bin/sh -c; with no command, an interactive shell starts.
Unlike ssh, the caller's environment and working directory are kept.

NODE is nI, nI-netK, nI.NAME or an address.  The cluster is --name, else
$VCLUSTER_NAME, else the only cluster up (or the only one that has NODE)."""

RSH_EPILOG = """\
exit status: that of the remote command, 1 if the node cannot be entered.

example:
  mpirun --allow-run-as-root --host n1,n2 \\
         --mca plm_rsh_agent "vcluster rsh" hostname"""

INVENTORY_HELP = """\
Print an Ansible inventory of cluster NAME, which must be up with --rootfs:
groups head (--head, default n1), compute (every node) and, with two networks
or more, ethernet_trunk; for each node its network-0 address as ansible_host
and score_networks (NIC, address and subnet per network); in all.vars, how to
reach the nodes (root, the cluster's ssh key, its known_hosts with every
node's host keys: host keys are checked), the apt proxy and the line of the
project's repository."""

INVENTORY_EPILOG = """\
exit status: 0, or 1 if the cluster is not up or has namespace-only nodes.

examples:
  vcluster inventory --name rf > inventory.yml
  ansible -i inventory.yml all -m ping
  ansible-playbook -i inventory.yml provisioning/site.yml"""

STATUS_HELP = """\
Show the clusters that are up: shape, rate, MTU, networks and bridges, every
node with its holder PID and addresses, and the processes running in each node
(PID and command line).  Leftovers of clusters without a state file are listed
too, with the command that removes them."""

STATUS_EPILOG = """\
exit status: 0, or 3 if --name names a cluster that is not up."""


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def _whole_number(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print no progress messages (errors still go to stderr)")

    p = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=_formatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser("up", parents=[common], help="create a cluster (idempotent)",
                        description=UP_HELP, epilog=UP_EPILOG, formatter_class=_formatter)
    up.add_argument("--nodes", "-N", type=_whole_number, required=True, metavar="N",
                    help=f"number of nodes, 1 to {naming.MAX_NODES}")
    up.add_argument("--nics", "-K", type=_whole_number, default=1, metavar="K",
                    help=f"NICs per node = networks, 1 to {naming.MAX_NICS} (default 1)")
    up.add_argument("--rate", metavar="RATE",
                    help="limit each direction of every link with tc, e.g. 100mbit, 1gbit "
                         "(tc units; default: unlimited)")
    up.add_argument("--mtu", type=_whole_number, default=shape_mod.DEFAULT_MTU, metavar="BYTES",
                    help=f"MTU of veths and bridges, {shape_mod.MIN_MTU} to {shape_mod.MAX_MTU} "
                         f"(default {shape_mod.DEFAULT_MTU})")
    up.add_argument("--name", default=naming.DEFAULT_CLUSTER, metavar="NAME",
                    help=f"cluster name, 1 to {naming.MAX_NAME_LEN} lowercase letters/digits "
                         f"starting with a letter (default {naming.DEFAULT_CLUSTER})")
    up.add_argument("--subnet", metavar="CIDR",
                    help="the cluster's IPv4 /16, e.g. 10.99.0.0/16 (default: first free of "
                         "10.250.0.0/16 .. 10.255.0.0/16)")
    up.add_argument("--json", action="store_true",
                    help='print {"changed": BOOL, "cluster": STATE} on stdout')
    services = up.add_mutually_exclusive_group()
    services.add_argument("--with-score", action="store_true",
                          help="also start munged everywhere and scored (master on the host, "
                               "an agent per node)")
    services.add_argument("--with-munge", action="store_true",
                          help="also start munged everywhere (no scored)")
    up.add_argument("--with-slurm", action="store_true",
                    help="also start munged if needed, slurmctld on the host and a slurmd "
                         "per node")
    up.add_argument("--slurm-gang", action="store_true",
                    help="with --with-slurm: Slurm's own gang scheduling (two jobs per node, "
                         f"suspended and resumed every {slurm.GANG_TIME_SLICE} s)")
    up.add_argument("--rootfs", action="store_true",
                    help="nodes with a root file system of their own, systemd and sshd "
                         "(see above)")
    up.add_argument("--repo", metavar="DIR",
                    help="with --rootfs: the apt repository to serve to the nodes (a "
                         "directory with a Packages file; default build/deb/repo if there)")
    up.add_argument("--archive", metavar="URI",
                    help="with --rootfs: the Debian archive the nodes' apt proxy fetches from "
                         "(default: the one the host's apt uses)")
    up.add_argument("--score-bin", metavar="DIR",
                    help="directory of scored and scorectl (default: build/bin of the "
                         "repository if scored is there, else PATH)")
    up.add_argument("--ready-timeout", type=float, default=score.READY_TIMEOUT, metavar="SECONDS",
                    help="with --with-score: how long to wait for every node to be up "
                         f"(default {score.READY_TIMEOUT:g})")
    up.add_argument("--score-master", action="append", default=[], metavar="KEY=VALUE",
                    help="set a [master] key of scored.toml (repeatable), e.g. gang_slots=1, "
                         "quantum_ms=100, preemption=freeze; VALUE is an integer, true/false "
                         "or a string")
    up.add_argument("--score-agent", action="append", default=[], metavar="KEY=VALUE",
                    help="set an [agent] key of every agent's scored.toml (repeatable), e.g. "
                         "pm_net_device=eth; VALUE as for --score-master")

    sup = sub.add_parser("score-up", parents=[common], help="start MUNGE and score on a cluster",
                         description=SCORE_UP_HELP, epilog=SCORE_UP_EPILOG,
                         formatter_class=_formatter)
    sup.add_argument("--name", default=naming.DEFAULT_CLUSTER, metavar="NAME",
                     help=f"cluster (default {naming.DEFAULT_CLUSTER})")
    sup.add_argument("--munge-only", action="store_true", help="start munged only")
    sup.add_argument("--score-bin", metavar="DIR",
                     help="directory of scored and scorectl (default: build/bin, else PATH)")
    sup.add_argument("--ready-timeout", type=float, default=score.READY_TIMEOUT, metavar="SECONDS",
                     help=f"how long to wait for every node to be up (default {score.READY_TIMEOUT:g})")
    sup.add_argument("--score-master", action="append", default=[], metavar="KEY=VALUE",
                    help="set a [master] key of scored.toml (repeatable), e.g. gang_slots=1, "
                         "quantum_ms=100, preemption=freeze; VALUE is an integer, true/false "
                         "or a string")
    sup.add_argument("--score-agent", action="append", default=[], metavar="KEY=VALUE",
                     help="set an [agent] key of every agent's scored.toml (repeatable), e.g. "
                          "pm_net_device=eth; VALUE as for --score-master")
    sup.add_argument("--json", action="store_true",
                     help='print {"changed": BOOL, "cluster": STATE} on stdout')

    sdown = sub.add_parser("score-down", parents=[common], help="stop score and MUNGE on a cluster",
                           description=SCORE_DOWN_HELP, formatter_class=_formatter)
    sdown.add_argument("--name", default=naming.DEFAULT_CLUSTER, metavar="NAME",
                       help=f"cluster (default {naming.DEFAULT_CLUSTER})")
    sdown.add_argument("--grace", type=float, default=score.DEFAULT_GRACE, metavar="SECONDS",
                       help=f"time between SIGTERM and SIGKILL (default {score.DEFAULT_GRACE:g})")

    slup = sub.add_parser("slurm-up", parents=[common], help="start Slurm on a cluster",
                          description=SLURM_UP_HELP, epilog=SLURM_UP_EPILOG,
                          formatter_class=_formatter)
    slup.add_argument("--name", default=naming.DEFAULT_CLUSTER, metavar="NAME",
                      help=f"cluster (default {naming.DEFAULT_CLUSTER})")
    slup.add_argument("--gang", action="store_true",
                      help="Slurm's own gang scheduling: PreemptMode=SUSPEND,GANG, "
                           f"SchedulerTimeSlice={slurm.GANG_TIME_SLICE}, OverSubscribe=FORCE:2")
    slup.add_argument("--ready-timeout", type=float, default=slurm.READY_TIMEOUT,
                      metavar="SECONDS",
                      help=f"how long to wait for every node to be idle "
                           f"(default {slurm.READY_TIMEOUT:g})")
    sldown = sub.add_parser("slurm-down", parents=[common], help="stop Slurm on a cluster",
                            description="Stop slurmd in every node, then slurmctld (SIGTERM, "
                                        "then SIGKILL after --grace seconds); remove their "
                                        "cgroups and files.  The network and MUNGE stay up.",
                            formatter_class=_formatter)
    sldown.add_argument("--name", default=naming.DEFAULT_CLUSTER, metavar="NAME",
                        help=f"cluster (default {naming.DEFAULT_CLUSTER})")
    sldown.add_argument("--grace", type=float, default=slurm.DEFAULT_GRACE, metavar="SECONDS",
                        help=f"time between SIGTERM and SIGKILL (default {slurm.DEFAULT_GRACE:g})")

    env = sub.add_parser("env", help="print the environment for score on a cluster",
                         description=ENV_HELP, formatter_class=_formatter)
    env.add_argument("--name", metavar="NAME",
                     help="cluster (default: $VCLUSTER_NAME, else the only cluster up)")
    env.add_argument("--node", metavar="NODE", help="the environment inside node NODE")
    env.add_argument("--json", action="store_true", help="print a JSON object instead")

    down = sub.add_parser("down", parents=[common], help="remove a cluster (idempotent)",
                          description=DOWN_HELP, epilog=DOWN_EPILOG, formatter_class=_formatter)
    which = down.add_mutually_exclusive_group()
    which.add_argument("--name", default=None, metavar="NAME",
                       help=f"cluster to remove (default {naming.DEFAULT_CLUSTER})")
    which.add_argument("--all", action="store_true",
                       help="remove every cluster of which anything exists")
    down.add_argument("--grace", type=float, default=teardown.DEFAULT_GRACE, metavar="SECONDS",
                      help="how long processes in the nodes may take to exit after SIGTERM "
                           f"before they get SIGKILL (default {teardown.DEFAULT_GRACE:g})")
    down.add_argument("--json", action="store_true",
                      help='print {"changed": BOOL, "removed": [NAMES]} on stdout')

    ex = sub.add_parser("exec", help="run a command inside a node",
                        description=EXEC_HELP, epilog=EXEC_EPILOG, formatter_class=_formatter,
                        usage="%(prog)s [-h] [--name NAME] NODE -- COMMAND [ARG...]")
    ex.add_argument("--name", metavar="NAME",
                    help="cluster (default: $VCLUSTER_NAME, else the only cluster up)")
    ex.add_argument("node", metavar="NODE", help="nI, nI-netK, nI.NAME or an address of the node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                    help="the command and its arguments, after --")

    sub.add_parser("rsh", help="ssh/rsh-compatible remote shell for launchers such as mpirun",
                   description=RSH_HELP, epilog=RSH_EPILOG, formatter_class=_formatter,
                   usage="%(prog)s [--name NAME] [SSH OPTIONS] [USER@]NODE [COMMAND...]")

    im = sub.add_parser("image", parents=[common],
                        help="build (once) the Debian image of root-file-system nodes",
                        description=IMAGE_HELP, epilog=IMAGE_EPILOG, formatter_class=_formatter)
    im.add_argument("--rebuild", action="store_true",
                    help="build it again even if an image of the same recipe is there")
    im.add_argument("--list", action="store_true", help="list the images built, newest first")
    im.add_argument("--mirror", metavar="URI",
                    help="the Debian archive to build from (default: the one the host's apt "
                         "uses, else http://deb.debian.org/debian)")
    im.add_argument("--json", action="store_true",
                    help='print {"path": ..., "built": BOOL, "recipe": ...} on stdout')

    inv = sub.add_parser("inventory", help="print an Ansible inventory of a --rootfs cluster",
                         description=INVENTORY_HELP, epilog=INVENTORY_EPILOG,
                         formatter_class=_formatter)
    inv.add_argument("--name", metavar="NAME",
                     help="cluster (default: $VCLUSTER_NAME, else the only cluster up)")
    inv.add_argument("--head", metavar="NODE", help="the head node (default n1)")
    inv.add_argument("--json", action="store_true", help="print JSON instead of YAML")

    st = sub.add_parser("status", help="show clusters, nodes and what runs in them",
                        description=STATUS_HELP, epilog=STATUS_EPILOG, formatter_class=_formatter)
    st.add_argument("--name", metavar="NAME", help="show only this cluster")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    return p


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived; raised like KeyboardInterrupt so `up` rolls back."""

    def __init__(self, signum):
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_terminated)
    try:
        # rsh takes ssh's options, which argparse cannot be taught; it is parsed by hand.
        if argv and argv[0] == "rsh" and not set(argv[1:2]) & {"-h", "--help"}:
            return _rsh(argv[1:])
        args = parser().parse_args(argv)
        log.set_quiet(getattr(args, "quiet", False))
        return {"up": _up, "down": _down, "exec": _exec, "status": _status, "image": _image,
                "score-up": _score_up, "score-down": _score_down, "env": _env,
                "slurm-up": _slurm_up, "slurm-down": _slurm_down,
                "inventory": _inventory}[args.command](args)
    except VclusterError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated as e:
        print(f"{PROG}: terminated by signal {e.signum}", file=sys.stderr)
        return 128 + e.signum


def _up(args):
    name = naming.validate_cluster_name(args.name)
    rate = shape_mod.parse_rate(args.rate) if args.rate is not None else None
    shape = Shape(nodes=args.nodes, nics=args.nics, rate=rate, mtu=args.mtu).validate()
    subnet = parse_subnet(args.subnet) if args.subnet else None
    if args.score_bin and not args.with_score:
        raise VclusterError("--score-bin needs --with-score", 2)
    if args.score_master and not args.with_score:
        raise VclusterError("--score-master needs --with-score", 2)
    if args.score_agent and not args.with_score:
        raise VclusterError("--score-agent needs --with-score", 2)
    overrides = score.parse_overrides(args.score_master)
    agent_overrides = score.parse_overrides(args.score_agent, "agent")
    if args.with_score or args.with_munge or args.with_slurm:  # fail early and cheaply
        score.munged_tool()
    if args.with_score:
        score.find_bin(args.score_bin)
    if args.slurm_gang and not args.with_slurm:
        raise VclusterError("--slurm-gang needs --with-slurm", 2)
    if args.with_slurm:
        system.require_tools(*slurm.TOOLS)
    if (args.repo or args.archive) and not args.rootfs:
        raise VclusterError("--repo and --archive need --rootfs", 2)
    rootfs = _rootfs_options(args) if args.rootfs else None
    changed, record = build.up(name, shape, subnet, rootfs)
    if args.with_score or args.with_munge or args.with_slurm:
        started, record = score.up(name, args.with_score, args.score_bin, args.ready_timeout,
                                   overrides, agent_overrides)
        changed = changed or started
    if args.with_slurm:
        started, record = slurm.up(name, gang=args.slurm_gang)
        changed = changed or started
    if args.json:
        print(json.dumps({"changed": changed, "cluster": record}, indent=2))
    return 0


def _rootfs_options(args):
    """Check --rootfs's options; build the image if needed (before anything
    of the cluster exists, so a failed build leaves nothing behind)."""
    services = [o for o, on in (("--with-score", args.with_score), ("--with-munge", args.with_munge),
                                ("--with-slurm", args.with_slurm)) if on]
    if services:
        raise VclusterError(f"--rootfs does not combine with {', '.join(services)}: on nodes of "
                            "their own, score and MUNGE are installed from their packages "
                            "(docs/admin/vcluster.md)", 2)
    system.require_tools("apt-cacher-ng", "ssh-keygen", "mmdebstrap")
    repo = args.repo
    if repo is None and (aptproxy.DEFAULT_REPO / "Packages").is_file():
        repo = str(aptproxy.DEFAULT_REPO)
    if repo is not None:
        repo = os.path.abspath(repo)
        if not os.path.isfile(os.path.join(repo, "Packages")):
            raise VclusterError(f"--repo {repo}: not an apt repository (no Packages file); "
                                "'make deb' builds one in build/deb/repo", 2)
    if args.archive and not args.archive.startswith("http://"):
        raise VclusterError(f"--archive {args.archive}: apt-cacher-ng fetches over http:// only", 2)
    path, _ = image.ensure()
    return {"image": path, "repo": repo, "archive": args.archive}


def _inventory(args):
    head = inventory.validate_head(args.head)
    current = enter.pick_cluster(args.name)
    inv = inventory.build(current, head)
    print(json.dumps(inv, indent=2) if args.json else "---\n" + inventory.to_yaml(inv))
    return 0


def _score_up(args):
    name = naming.validate_cluster_name(args.name)
    if args.score_bin and args.munge_only:
        raise VclusterError("--score-bin makes no sense with --munge-only", 2)
    if (args.score_master or args.score_agent) and args.munge_only:
        raise VclusterError("--score-master and --score-agent make no sense with --munge-only", 2)
    changed, record = score.up(name, not args.munge_only, args.score_bin, args.ready_timeout,
                               score.parse_overrides(args.score_master),
                               score.parse_overrides(args.score_agent, "agent"))
    if args.json:
        print(json.dumps({"changed": changed, "cluster": record}, indent=2))
    return 0


def _score_down(args):
    if args.grace < 0:
        raise VclusterError("--grace must not be negative")
    score.down(naming.validate_cluster_name(args.name), grace=args.grace)
    return 0


def _slurm_up(args):
    slurm.up(naming.validate_cluster_name(args.name), args.ready_timeout, args.gang)
    return 0


def _slurm_down(args):
    if args.grace < 0:
        raise VclusterError("--grace must not be negative")
    slurm.down(naming.validate_cluster_name(args.name), grace=args.grace)
    return 0


def _env(args):
    current = enter.pick_cluster(args.name, args.node)
    node = None
    if args.node:
        node = enter.resolve_node(current, args.node)[1].name
    env = score.environment(current, node)
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        for key, value in env.items():
            print(f"export {key}={shlex.quote(value)}")
    if not current.get("score"):
        log.warn(f"score is not running on cluster {current['name']}; "
                 f"start it with 'vcluster score-up --name {current['name']}'")
    return 0


def _down(args):
    if args.grace < 0:
        raise VclusterError("--grace must not be negative")
    names = teardown.all_clusters() if args.all else \
        [naming.validate_cluster_name(args.name or naming.DEFAULT_CLUSTER)]
    if args.all and not names:
        log.step("no cluster is up; nothing to do")
    removed = [name for name in names if teardown.down(name, grace=args.grace)]
    if args.json:
        print(json.dumps({"changed": bool(removed), "removed": removed}))
    return 0


def _exec(args):
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise VclusterError("exec: no command given (usage: vcluster exec NODE -- COMMAND [ARG...])", 2)
    enter.exec_in(args.name, args.node, cmd)


def _rsh(argv):
    name, node, words = rsh.parse(argv)
    enter.exec_in(name, node, rsh.remote_argv(words))


def _image(args):
    if args.list:
        found = image.list_images()
        if args.json:
            print(json.dumps([{"path": p, "recipe": r} for p, r in found], indent=2))
        for p, r in ([] if args.json else found):
            print(f"{p}  {r['suite']}, {len(r['packages'])} packages, from {r['sources'][0].split()[1]}")
        return 0
    path, built = image.ensure(rebuild=args.rebuild, main=args.mirror)
    if args.json:
        print(json.dumps({"path": path, "built": built, "recipe": image.recipe(args.mirror)},
                         indent=2))
    else:
        print(path)
    return 0


def _status(args):
    return status.show(args.name, args.json)
