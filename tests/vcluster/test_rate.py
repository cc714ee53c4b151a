"""--rate limits a link to its rate and no --rate leaves it unlimited.

These assert the behaviour of the limiter (a 100mbit link delivers about
100 Mbit/s, a 1gbit link at most 1 Gbit/s; an unlimited veth is far
faster), not the speed of the machine.
Each measurement is one bounded iperf3 run: server `iperf3 -s -1` in n1,
client `iperf3 -c n1 -t 2 -J` in n2; the server is killed by PID afterwards.
"""

import json
import shutil
import time

import pytest

pytestmark = pytest.mark.skipif(shutil.which("iperf3") is None,
                                reason="iperf3 is not installed (scripts/install-deps.sh)")

MBIT = 1_000_000
PORT = 5201
SECONDS = 2


def measure(vc):
    """Bits per second received by n1 from n2 over network 0."""
    server = vc.popen("n1", "iperf3", "-s", "-1", "-p", str(PORT))
    try:
        _wait_listening(vc, "n1", PORT)
        proc = vc.exec("n2", "iperf3", "-c", vc.address("n1"), "-p", str(PORT),
                       "-t", str(SECONDS), "-J", timeout=SECONDS + 20)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
        return json.loads(proc.stdout)["end"]["sum_received"]["bits_per_second"]
    finally:
        vc.kill_processes()


def _wait_listening(vc, node, port, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = vc.exec(node, "ss", "-Hltn", f"sport = :{port}").stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise AssertionError(f"iperf3 server in {node} did not listen on port {port} within {timeout}s")


def test_a_100mbit_link_delivers_about_100mbit(vcluster):
    bps = measure(vcluster(nodes=2, rate="100mbit"))
    print(f"\n--rate 100mbit: iperf3 measured {bps / MBIT:.1f} Mbit/s")
    assert 0.7 * 100 * MBIT <= bps <= 1.05 * 100 * MBIT


def test_an_unlimited_link_is_not_limited(vcluster):
    bps = measure(vcluster(nodes=2))
    print(f"\nno --rate: iperf3 measured {bps / MBIT:.1f} Mbit/s")
    assert bps > 3 * 100 * MBIT


def test_a_1gbit_link_is_limited_to_1gbit(vcluster):
    """The limiter caps a 1gbit link at 1 Gbit/s (an unlimited veth carries
    several times that, test_an_unlimited_link_is_not_limited), and the rate
    is taken as 1 Gbit/s, not a lower one: the link carries clearly more
    than a 100mbit link can.  The floor is the unlimited test's, so a slow
    machine that cannot fill 1 Gbit/s still passes."""
    bps = measure(vcluster(nodes=2, rate="1gbit"))
    print(f"\n--rate 1gbit: iperf3 measured {bps / MBIT:.1f} Mbit/s")
    assert 3 * 100 * MBIT < bps <= 1.05 * 1000 * MBIT
