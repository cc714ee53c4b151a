"""`vcluster inventory`: an Ansible inventory of a root-file-system cluster.

    all:
      vars:      how to reach the nodes (root, the cluster's ssh key, its
                 known_hosts), the apt proxy and repository line
      children:
        head:            the node that runs the services of the head (master,
                         slurmctld, Prometheus): --head, default n1
        compute:         every node (the head computes too in a small cluster)
        ethernet_trunk:  every node, when the cluster has 2 networks or more
                         (PM trunks over them)
        smp:             every node (each has the host's CPUs and NUMA
                         domains; role score_smp reads them)
        rdma:            none: no node has RDMA hardware (role score_rdma)
      hosts:     nI with ansible_host (its network-0 address) and
                 score_networks: one entry per network (NIC, address, subnet)

Printed as YAML; every scalar is written as a JSON string or number, which
YAML reads as the same value.
"""

import json

from . import aptproxy, machines, naming, state
from .errors import VclusterError


def build(current, head=None):
    """The inventory of cluster state `current` as a dict."""
    if not current.get("rootfs"):
        raise VclusterError(f"cluster {current['name']} has namespace-only nodes, which have no "
                            "ssh and no root file system of their own; an inventory needs "
                            "'vcluster up --rootfs'")
    layout = state.layout(current)
    head = head or layout.nodes[0].name
    if layout.node(head) is None:
        raise VclusterError(f"--head {head}: no such node in cluster {layout.name} "
                            f"(n1 to n{len(layout.nodes)})")
    proxy_address = layout.networks[0].host_address
    hosts = {}
    for node in layout.nodes:
        hosts[node.name] = {
            "ansible_host": node.nics[0].address,
            "score_networks": [{"nic": nic.ifname, "address": nic.address,
                                "subnet": str(layout.networks[nic.network].subnet)}
                               for nic in node.nics],
        }
    ssh_args = " ".join(machines.ssh_options(layout.name)[2:])
    children = {"head": {"hosts": {head: {}}},
                "compute": {"hosts": {n.name: {} for n in layout.nodes}}}
    if len(layout.networks) > 1:
        children["ethernet_trunk"] = {"hosts": {n.name: {} for n in layout.nodes}}
    children["smp"] = {"hosts": {n.name: {} for n in layout.nodes}}
    children["rdma"] = {"hosts": {}}
    return {"all": {
        "vars": {
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(machines.key_path(layout.name)),
            "ansible_ssh_common_args": ssh_args,
            # A connection lost (ssh's exit status 255) is tried again.
            "ansible_ssh_retries": 3,
            "score_cluster": layout.name,
            "score_apt_proxy": aptproxy.proxy_url(proxy_address),
            "score_apt_repository": aptproxy.repo_line(proxy_address),
            # One node at a time: the proxy refreshes an index for every
            # request (aptproxy.py), and fails one of two in the same second.
            "score_apt_update_throttle": 1,
        },
        "hosts": hosts,
        "children": children,
    }}


def to_yaml(value, indent=0):
    """A small YAML writer for dicts, lists and scalars (as JSON)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:\n{to_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{k}: {to_yaml(v)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        lines = []
        for item in value:
            body = to_yaml(item, indent + 1).lstrip()
            lines.append(f"{pad}- {body}")
        return "\n".join(lines)
    return json.dumps(value)


def validate_head(head):
    if head is not None and not naming.node_index(head):
        raise VclusterError(f"--head {head}: a node is named nI (n1, n2, ...)", 2)
    return head
