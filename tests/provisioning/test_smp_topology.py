"""The topology reader of the role score_smp (roles/score_smp/files/
score-topology): hwloc cpusets decoded, and the placement order (every
core's first hardware thread before any second one, NUMA domains in turn),
on hwloc XML of machines this one is not.  The role itself runs on real
nodes in tests/packaging/test_cluster.py."""

import json
import subprocess
from types import SimpleNamespace

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "roles" / "score_smp" / "files" / "score-topology"


def load():
    namespace = {"__name__": "score_topology"}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), namespace)
    return SimpleNamespace(**namespace)


def test_cpusets_are_decoded_word_by_word():
    t = load()
    assert t.cpus_of("0x00000001") == [0]
    assert t.cpus_of("0x0000000f") == [0, 1, 2, 3]
    assert t.cpus_of("0x00000001,0x80000000") == [31, 32]


def test_placement_spreads_over_numa_domains_cores_before_threads():
    t = load()
    # 2 domains of 4 cores, 2 threads per core (CPU n and n+8 share a core).
    cores = [[c, c + 8] for c in range(8)]
    numa = [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    assert t.placement(cores, numa) == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]
    # One domain, no threads: the cores in order.
    assert t.placement([[0], [1], [2]], [[0, 1, 2]]) == [0, 1, 2]
    # No NUMA information: one domain.
    assert t.placement([[0, 2], [1, 3]], []) == [0, 1, 2, 3]


TWO_SOCKETS = """<?xml version="1.0" encoding="UTF-8"?>
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x000000ff">
  <object type="Package" os_index="0" cpuset="0x00000033">
   <object type="NUMANode" os_index="0" cpuset="0x00000033" local_memory="8589934592"/>
   <object type="Core" os_index="0" cpuset="0x00000011">
    <object type="PU" os_index="0" cpuset="0x00000001"/>
    <object type="PU" os_index="4" cpuset="0x00000010"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x00000022">
    <object type="PU" os_index="1" cpuset="0x00000002"/>
    <object type="PU" os_index="5" cpuset="0x00000020"/>
   </object>
  </object>
  <object type="Package" os_index="1" cpuset="0x000000cc">
   <object type="NUMANode" os_index="1" cpuset="0x000000cc" local_memory="8589934592"/>
   <object type="Core" os_index="0" cpuset="0x00000044">
    <object type="PU" os_index="2" cpuset="0x00000004"/>
    <object type="PU" os_index="6" cpuset="0x00000040"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x00000088">
    <object type="PU" os_index="3" cpuset="0x00000008"/>
    <object type="PU" os_index="7" cpuset="0x00000080"/>
   </object>
  </object>
 </object>
</topology>
"""


def test_a_two_socket_machine_as_the_fact_says(capsys):
    t = load()

    def fake_run(argv, **kwargs):
        assert argv[0] == "lstopo-no-graphics"
        return subprocess.CompletedProcess(argv, 0, TWO_SOCKETS, "")
    t.main.__globals__["subprocess"] = SimpleNamespace(run=fake_run)
    t.main()
    fact = json.loads(capsys.readouterr().out)
    assert fact == {"packages": 2, "cores": 4, "pus": 8, "threads_per_core": 2,
                    "cores_per_package": 2,
                    "numa": [{"node": 0, "cpus": [0, 1, 4, 5]},
                             {"node": 1, "cpus": [2, 3, 6, 7]}],
                    "placement": [0, 2, 1, 3, 4, 6, 5, 7]}
