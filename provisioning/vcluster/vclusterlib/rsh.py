"""`vcluster rsh`: a stand-in for ssh/rsh, as launchers such as Open MPI's
mpirun (`--mca plm_rsh_agent "vcluster rsh"`) or pdsh call it.

Accepted:  vcluster rsh [--name NAME] [SSH OPTIONS] [USER@]NODE [COMMAND...]

ssh's options before the host are accepted and ignored (-x, -n, -T, -l USER,
-o OPTION, -p PORT, ..., also combined as -xT or -p22).  As with ssh, the
command words are joined with spaces and run by a shell (/bin/sh -c), so a
whole shell command can be passed as one word; without a command an
interactive shell starts.  Unlike ssh, the environment and the working
directory of the caller are kept (all nodes share the host's file system).
"""

import os

from .errors import VclusterError

# ssh(1) options of OpenSSH 9: with an argument / without one.
_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
_WITHOUT_ARG = set("1246AaCfGgKkMNnqsTtVvXxYy")


def parse(args):
    """(cluster name or None, node, [command words]) from rsh-style arguments."""
    name = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--name":
            if i + 1 >= len(args):
                raise VclusterError("rsh: --name needs a cluster name")
            name, i = args[i + 1], i + 2
            continue
        if arg.startswith("--name="):
            name, i = arg[len("--name="):], i + 1
            continue
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        i += 1 + _skip_option_cluster(arg, i + 1 < len(args))
    if i >= len(args):
        raise VclusterError("rsh: no node given (usage: vcluster rsh [OPTIONS] NODE [COMMAND...])")
    node = args[i].rsplit("@", 1)[-1]  # user@node: every user is the caller here
    return name, node, args[i + 1:]


def _skip_option_cluster(arg, has_next):
    """How many following arguments an option word such as -xTp consumes."""
    for pos, letter in enumerate(arg[1:], start=1):
        if letter in _WITH_ARG:
            if pos + 1 < len(arg):       # -p22: the argument is attached
                return 0
            if not has_next:
                raise VclusterError(f"rsh: option -{letter} needs an argument")
            return 1
        if letter not in _WITHOUT_ARG:
            raise VclusterError(f"rsh: unknown option -{letter} in {arg!r}")
    return 0


def remote_argv(words):
    """What ssh would run for these command words."""
    if not words:
        return [os.environ.get("SHELL") or "/bin/sh", "-i"]
    return ["/bin/sh", "-c", " ".join(words)]
