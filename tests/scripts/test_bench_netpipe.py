"""scripts/bench_netpipe.py: the time of a NetPIPE row is taken from its
"Mbps" column, which keeps the digits the printed time (10 ns steps) loses.
Pure logic: rows as NetPIPE 3.7 (Debian's NPopenmpi) writes them."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import bench_netpipe  # noqa: E402


def test_time_comes_from_mbps():
    # 64 bits / (130.076647 x 2^20 bits/s): 0.46922 us, printed as 0.47.
    [row] = bench_netpipe.rows("       8 130.076647   0.00000047\n")
    assert row["bytes"] == 8
    assert row["np_seconds"] == pytest.approx(0.47e-6)
    assert row["seconds"] == pytest.approx(0.46922455e-6, rel=1e-6)
    assert row["seconds"] != row["np_seconds"]


def test_large_rows_and_blank_lines():
    text = "\n 4194304 122070.312500   0.00026214\n\n"
    [row] = bench_netpipe.rows(text)
    assert row["seconds"] == pytest.approx(4194304 * 8 / (122070.3125 * 2 ** 20))
    assert row["seconds"] == pytest.approx(0.00026214, abs=5e-9)


@pytest.mark.parametrize("line", [
    "       8 130.076647   0.00000060",   # the two columns disagree
    "       8 0.000000   0.00000047",     # no rate
    "       8 130.076647   0.00000000",   # no time
])
def test_inconsistent_rows_are_refused(line):
    with pytest.raises(bench_netpipe.NetpipeError, match="8 bytes"):
        bench_netpipe.rows(line)
