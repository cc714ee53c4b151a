"""The pure parts of vcluster, without root: rate syntax, names, the address
plan and its route check, rsh's ssh-option parsing, the /etc/hosts block."""

import ipaddress
import sys

import pytest

from conftest import VCLUSTER_DIR

sys.path.insert(0, str(VCLUSTER_DIR))

from vclusterlib import addressing, hosts, naming, rsh, system  # noqa: E402
from vclusterlib.addressing import Layout  # noqa: E402
from vclusterlib.errors import VclusterError  # noqa: E402
from vclusterlib.shape import Shape, format_rate, parse_rate  # noqa: E402


@pytest.mark.parametrize("text, bits", [
    ("1gbit", 10**9), ("100mbit", 10**8), ("1000mbit", 10**9), ("2.5gbit", 2_500_000_000),
    ("500kbit", 500_000), ("10mbps", 80_000_000), ("1mibit", 2**20), ("8000bit", 8000),
    (" 1GBit ", 10**9),
])
def test_rates_use_tc_units(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["fast", "100", "100m", "1 gbit", "-1gbit", "1e9bit", "gbit",
                                  "1bit", "500gbit"])
def test_bad_rates_are_rejected(text):
    with pytest.raises(VclusterError, match="bad rate"):
        parse_rate(text)


def test_rates_print_in_their_shortest_form():
    assert [format_rate(r) for r in (10**9, 10**8, 2_500_000_000, 1234, None)] == \
        ["1gbit", "100mbit", "2500mbit", "1234bit", "unlimited"]


def test_names_fit_linux_interface_names():
    longest = "a" * naming.MAX_NAME_LEN
    for ifname in (naming.bridge_name(longest, naming.MAX_NICS - 1),
                   naming.host_veth_name(longest, naming.node_name(naming.MAX_NODES),
                                         naming.MAX_NICS - 1)):
        assert len(ifname) <= 15, ifname
    with pytest.raises(VclusterError):
        naming.validate_cluster_name(longest + "a")


def test_names_round_trip():
    assert naming.parse_netns_name(naming.netns_name("vc", "n12")) == ("vc", "n12")
    assert naming.parse_netns_name("vcluster-vc-x1") is None
    assert naming.parse_netns_name(naming.switch_netns_name("vc")) == ("vc", naming.SWITCH)
    assert naming.parse_holder_tag(naming.holder_tag("big", "n3")) == ("big", "n3")
    assert naming.parse_link_alias(naming.link_alias("vc")) == "vc"
    assert naming.is_cluster_link_name("vc", "vc-n3-1")
    assert naming.is_cluster_link_name("vc", "vc-br0")
    assert not naming.is_cluster_link_name("vc", "vc2-br0")
    assert not naming.is_cluster_link_name("vc", "vcx-n1-0")


def test_layout_addresses_and_names():
    layout = Layout("vc", Shape(nodes=3, nics=2), "10.250.0.0/16")
    assert [n.subnet for n in layout.networks] == [ipaddress.ip_network("10.250.0.0/24"),
                                                     ipaddress.ip_network("10.250.1.0/24")]
    assert layout.networks[1].host_address == "10.250.1.254"
    n2 = layout.node("n2")
    assert [(c.ifname, c.host_ifname, c.address) for c in n2.nics] == \
        [("eth0", "vc-n2-0", "10.250.0.2"), ("eth1", "vc-n2-1", "10.250.1.2")]
    for target in ("n2", "n2-net0", "n2-net1", "n2.vc", "n2-net1.vc", "10.250.1.2"):
        assert layout.resolve(target) is n2, target
    for target in ("n4", "n2-net2", "n2.other", "10.250.1.254", "host"):
        assert layout.resolve(target) is None, target


def route(dst, dev="eth0", table="main", kind=None):
    r = {"dst": dst, "dev": dev, "table": table}
    if kind:
        r["type"] = kind
    return r


def test_subnet_choice_avoids_routes_and_other_clusters():
    routes = addressing.foreign_routes(
        [route("default"), route("10.250.1.0/24"), route("10.251.0.0/24", dev="other-br0"),
         route("127.0.0.0/8", dev="lo", table="local", kind="local")],
        cluster_links={"other-br0": "other"})
    taken = {ipaddress.ip_network("10.251.0.0/16"): "other"}
    # One NIC fits beside the 10.250.1.0/24 route; two do not.
    assert addressing.choose_subnet(None, 1, routes, taken) == ipaddress.ip_network("10.250.0.0/16")
    assert addressing.choose_subnet(None, 2, routes, taken) == ipaddress.ip_network("10.252.0.0/16")
    with pytest.raises(VclusterError, match="is used by cluster other"):
        addressing.choose_subnet(ipaddress.ip_network("10.251.0.0/16"), 1, routes, taken)
    with pytest.raises(VclusterError, match=r"overlaps host routes: 10\.250\.1\.0/24 dev eth0"):
        addressing.choose_subnet(ipaddress.ip_network("10.250.0.0/16"), 2, routes, taken)


def test_a_host_route_over_the_whole_pool_is_a_clear_error():
    routes = addressing.foreign_routes([route("10.0.0.0/8", dev="vpn0")], {})
    with pytest.raises(VclusterError, match="no free subnet in the default plan.*10.0.0.0/8 dev vpn0"
                                            ".*choose one with --subnet"):
        addressing.choose_subnet(None, 1, routes, {})


@pytest.mark.parametrize("args, expected", [
    (["n1", "hostname"], (None, "n1", ["hostname"])),
    (["-x", "n2", "echo", "a b"], (None, "n2", ["echo", "a b"])),
    (["-xT", "-n", "-l", "root", "-o", "BatchMode=yes", "-p", "22", "n3", "true"],
     (None, "n3", ["true"])),
    (["-p22", "-oStrictHostKeyChecking=no", "user@n4", "x"], (None, "n4", ["x"])),
    (["--name", "big", "-x", "n1-net1", "a", "-b"], ("big", "n1-net1", ["a", "-b"])),
    (["--name=big", "--", "n1"], ("big", "n1", [])),
])
def test_rsh_accepts_ssh_options(args, expected):
    assert rsh.parse(args) == expected


def test_rsh_runs_the_joined_words_with_sh():
    assert rsh.remote_argv(["echo", "a", "$HOME"]) == ["/bin/sh", "-c", "echo a $HOME"]


def test_host_block_is_replaced_and_removed_in_place(tmp_path, monkeypatch):
    etc_hosts = tmp_path / "hosts"
    etc_hosts.write_text("127.0.0.1 localhost\n# BEGIN vcluster other\n1.2.3.4 x\n# END vcluster other\n")
    monkeypatch.setattr(hosts, "ETC_HOSTS", etc_hosts)
    inode = etc_hosts.stat().st_ino
    hosts.set_host_block(Layout("vc", Shape(nodes=2), "10.250.0.0/16"))
    hosts.set_host_block(Layout("vc", Shape(nodes=1), "10.250.0.0/16"))
    text = etc_hosts.read_text()
    assert text.count("# BEGIN vcluster vc") == 1
    assert "10.250.0.1\tn1 n1-net0 n1.vc n1-net0.vc\n" in text and "n2" not in text
    assert hosts.host_block_clusters() == ["other", "vc"]
    assert hosts.remove_host_block("vc") is True
    assert hosts.remove_host_block("vc") is False
    assert etc_hosts.read_text() == "127.0.0.1 localhost\n# BEGIN vcluster other\n1.2.3.4 x\n" \
                                    "# END vcluster other\n"
    assert etc_hosts.stat().st_ino == inode  # bind mounts of /etc/hosts keep working


def test_a_missing_tool_names_its_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(system, "_EXTRA_PATH", str(tmp_path))
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        with pytest.raises(VclusterError, match=rf"missing '{tool}' \(Debian package {package}\); "
                                                rf"install it with: apt-get install {package}"):
            system.require_tools(tool)
