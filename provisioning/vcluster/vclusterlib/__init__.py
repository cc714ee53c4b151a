"""vclusterlib: the pieces behind the `vcluster` command.

One machine plays a whole cluster: every node is a network namespace with its
own UTS and mount namespace, every NIC a veth pair into one Linux bridge per
network.  Each module has one responsibility:

    errors      the one exception type the command line reports
    log         progress messages on stderr
    naming      names of clusters, nodes, namespaces and interfaces
    shape       what a cluster looks like (nodes, NICs, rate, MTU) and rate syntax
    addressing  the address plan and the check against the host's routes
    system      running ip/tc and other tools, reading their JSON
    state       the state files under /run/score/vcluster and the lock
    hosts       hosts tables inside the nodes and the block in /etc/hosts
    holder      the per-node holder processes that own the UTS/mount namespaces
    procs       finding and ending the processes that run inside a node
    build       `up`: creating a cluster, rolling back on failure
    teardown    `down`: discovering and removing everything of a cluster
    score       services on a cluster: munged everywhere, scored master and
                agents, their configurations and cgroups (--with-score)
    enter       resolving a node and building the command that enters it
    rsh         ssh/rsh-compatible argument parsing
    status      gathering and printing what is up
    cli         the argparse front end
"""
