"""The example programs' own options, on this machine (dsm/examples/README.md).

- jacobi_mpi --barrier (every rank waits for all after each sweep): the
  same result as without it and as the sequential program, and its result
  line says so.
- jacobi_dsm meets all ranks after each sweep (pmdsm_barrier), or with
  --neighbours only its two neighbours (pmdsm_barrier_with, counted in
  peer_barriers; their edge rows pushed, counted in push_taken), or with
  --split the same in two halves (pmdsm_barrier_with_notify, _wait; one
  peer barrier each): the sequential result every way, also with more
  ranks than rows.
- A page read ahead past a neighbour's row and never read again stops
  being fetched at barriers, in either grid: the probes that find it
  unread fall on both grids' departures (docs/dsm/design.md, "Prefetch at
  barriers"); at barriers of a few, its home stops pushing it (design.md,
  "Pushes").
- histogram_dsm's ranks read each other's items between taking tasks
  under a lock: an acquire drops only the pages written under the locks
  (the queue's and the bins'), not every page read from another rank so
  far (docs/dsm/design.md, "Pages no other rank copies": a first copy
  asks its home to watch the page, so it needs no notice of its own).
- --barrier belongs to the MPI version, --neighbours and --split to the
  DSM version: the others refuse them with a usage error (exit 2) naming
  the option.
- Every MPI version runs over PM (pml cm, mtl ofi, the provider pm; PM's
  shm device, and its udp device on loopback) and gives the sequential
  program's result: halo exchanges, gathers and a reduction of real
  programs through libpm-fi (docs/mpi/guide.md, "Under mpirun").

mpirun runs two ranks on this machine (Open MPI's own transports); every
command is bounded in time."""

import json
import os
import re
import subprocess

import pytest

from scored.score import BUILD_BIN

ARGS = ["-n", "256", "-i", "20", "-s", "7"]
TIMEOUT = 120
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", "2"]
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run(argv, **env):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, **ROOT_OK, **env), check=False)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stderr}"
    return proc


def result_line(argv, **env):
    proc = run(argv, **env)
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, f"{argv}: one result line expected:\n{proc.stdout}"
    return lines[0]


def dsm_counters(stderr):
    """Each rank's counters from the lines PMDSM_STATS=1 writes at finalize."""
    ranks = {}
    for line in stderr.splitlines():
        m = re.match(r"pmdsm\[(\d+)\]: counters: (.*)", line)
        if m:
            ranks[int(m[1])] = {k: int(v) for k, v in (f.split("=") for f in m[2].split())}
    return ranks


def test_jacobi_mpi_with_a_barrier_every_sweep_gives_the_sequential_result():
    seq = result_line([BUILD_BIN / "jacobi_seq", *ARGS])
    plain = result_line([*MPIRUN, BUILD_BIN / "jacobi_mpi", *ARGS, "--check"])
    barrier = result_line([*MPIRUN, BUILD_BIN / "jacobi_mpi", *ARGS, "--barrier", "--check"])
    assert barrier["checksum"] == plain["checksum"] == seq["checksum"]
    assert barrier.get("barrier") is True
    assert "barrier" not in plain
    assert barrier["ranks"] == 2


# jacobi_dsm's ways to synchronise a sweep: its option, as its result line says it.
SYNCS = {"all": [], "neighbours": ["--neighbours"], "split": ["--split"]}


def test_jacobi_dsm_meets_everyone_or_only_its_neighbours_whole_or_split():
    seq = result_line([BUILD_BIN / "jacobi_seq", *ARGS])
    iterations = int(ARGS[ARGS.index("-i") + 1])
    for ranks in (2, 3):
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(ranks),
               BUILD_BIN / "jacobi_dsm", *ARGS, "--check"]
        for sync, option in SYNCS.items():
            proc = run(cmd + option, PMDSM_STATS="1")
            line = json.loads(proc.stdout)
            assert line["checksum"] == seq["checksum"], (ranks, sync)
            assert line.get("neighbours", False) is (sync != "all"), line
            assert line.get("split", False) is (sync == "split"), line
            counters = dsm_counters(proc.stderr)
            assert sorted(counters) == list(range(ranks)), proc.stderr
            for rank, c in counters.items():
                if sync == "all":
                    assert c["peer_barriers"] == 0 and c["pushed_pages"] == 0
                    assert c["barriers"] >= iterations
                else:
                    # One meeting per sweep (a notify and its wait are
                    # one), and a barrier of all only around the sweeps
                    # (start, end, the frees).
                    assert c["peer_barriers"] == iterations, (rank, sync, c)
                    assert c["barriers"] < iterations, (rank, sync, c)
            if sync != "all":
                # Edge rows come as pushes after the first sweeps (not
                # those on a page that two ranks' rows share: both write it).
                taken = sum(c["push_taken"] for c in counters.values())
                assert taken > 0, (sync, counters)


def counter_growth(counter, *options):
    """Per rank, how much counter grew over 160 more sweeps of jacobi_dsm
    -n 1024 on 2 ranks (rows of 2 pages): its value at -i 200 minus at
    -i 40, each run exact and dropping no message."""
    seen = {}
    for sweeps in (40, 200):
        args = ["-n", "1024", "-i", str(sweeps), "-s", "7"]
        proc = run([*MPIRUN, BUILD_BIN / "jacobi_dsm", *args, *options, "--check"],
                   PMDSM_STATS="1", PMDSM_WRITE_DETECT="uffd-async")
        line = json.loads(proc.stdout)
        assert line["checksum"] == result_line([BUILD_BIN / "jacobi_seq", *args])["checksum"]
        counters = dsm_counters(proc.stderr)
        assert all(c["dropped"] == 0 for c in counters.values()), counters
        seen[sweeps] = {rank: c[counter] for rank, c in counters.items()}
    return {rank: seen[200][rank] - seen[40][rank] for rank in seen[200]}, seen


def test_pages_read_ahead_and_never_read_again_stop_being_prefetched():
    """jacobi_dsm -n 1024 on 2 ranks: a row is 2 pages.  Rank 0 reads rank
    1's first row of each grid; its first sweep on each grid faults there
    and reads ahead one page of rank 1's second row, which it never reads.
    At each barrier it prefetches the row the departure drops (one grid's,
    then the other's), and that extra page only until a probe of its grid
    finds it unread.  So 160 more sweeps prefetch 2 pages a barrier, not
    more: with a probe period of 8 the probes all fell on one grid, and the
    other's extra page came every second barrier for good (2.5 a barrier).
    The runs' first sweeps differ by a few pages from run to run (how
    their first faults and prefetches meet): the bounds leave room."""
    more, fetched = counter_growth("prefetched_pages")
    assert 2 * 160 - 16 <= more[0] <= 2 * 160 + 16, fetched


def test_pushes_of_pages_never_read_again_lapse():
    """The same at barriers of a few (jacobi_dsm --neighbours, 2 ranks,
    rows of 2 pages): the extra page read ahead on a neighbour's second
    row is fetched again at the first meetings, so its home is asked to
    push it; a probe finds it unread, the home is told to stop
    (UNSUBSCRIBE), and a push it sent before it heard is not taken.  So
    160 more sweeps push each rank's edge row, 2 pages, per meeting, not
    more: before, the asking never lapsed and rank 1 pushed the extra
    page at every meeting (some 3 pages a meeting)."""
    more, pushed = counter_growth("pushed_pages", "--neighbours")
    for rank in (0, 1):
        assert 2 * 160 - 16 <= more[rank] <= 2 * 160 + 16, (rank, pushed)


def test_an_acquire_drops_only_what_was_written_under_the_locks():
    """histogram_dsm -m 2000000 on 2 ranks: some 200 tasks taken one at a
    time under the task lock, each counting items of either rank's block,
    then the bins added under their locks.  Only the queue's page and the
    bins' page are written after the first barrier, so an acquire drops
    at most those two; when every item page read from the other rank was
    named in the notices a lock passes on, each acquire dropped the copies
    read since (about four times as many pages as acquires)."""
    args = ["-m", "2000000", "-s", "7"]
    proc = run([*MPIRUN, BUILD_BIN / "histogram_dsm", *args, "--check"], PMDSM_STATS="1")
    line = json.loads(proc.stdout)
    assert line["checksum"] == result_line([BUILD_BIN / "histogram_seq", *args])["checksum"]
    counters = dsm_counters(proc.stderr)
    assert sorted(counters) == [0, 1], proc.stderr
    for rank, c in counters.items():
        assert c["dropped"] == 0, (rank, c)
        assert c["locks"] > 0 and c["pages_fetched"] > 0, (rank, c)
        # The barriers' notices (init, the two of the program, finalize)
        # may drop a few more.
        assert c["invalidations"] <= 2 * c["locks"] + 8, (rank, c)


def test_jacobi_dsm_with_more_ranks_than_rows():
    args = ["-n", "4", "-i", "5", "-s", "7"]
    seq = result_line([BUILD_BIN / "jacobi_seq", *args])
    for option in SYNCS.values():
        line = result_line(["mpirun", "--oversubscribe", "--bind-to", "none", "-n", "6",
                            BUILD_BIN / "jacobi_dsm", *args, *option, "--check"])
        assert line["checksum"] == seq["checksum"], option
        assert line["ranks"] == 6


def test_each_sync_option_belongs_to_one_version():
    for version, option in (("seq", "--barrier"), ("dsm", "--barrier"),
                            ("seq", "--neighbours"), ("mpi", "--neighbours"),
                            ("seq", "--split"), ("mpi", "--split")):
        proc = subprocess.run([BUILD_BIN / f"jacobi_{version}", *ARGS, option],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert proc.returncode == 2, (version, option, proc.stderr)
        assert f"unknown option {option}" in proc.stderr
        assert proc.stdout == ""
    for version, option in (("dsm", "--neighbours"), ("dsm", "--split"),
                            ("mpi", "--barrier")):
        proc = subprocess.run([BUILD_BIN / f"jacobi_{version}", "--help"],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert proc.returncode == 0 and option in proc.stdout


# Each example, small: the arguments of all three versions.
SMALL = {"jacobi": ARGS, "sor": ["-n", "256", "-i", "6", "-s", "7"],
         "matmul": ["-n", "96", "-s", "7"], "histogram": ["-m", "200000", "-s", "7"]}
OVER_PM = ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "pm",
           "-x", f"FI_PROVIDER_PATH={BUILD_BIN.parent / 'lib' / 'libfabric'}"]
PM_DEVICES = {"shm": [], "udp": ["-x", "PM_DEVICE=udp", "-x", "PM_UDP_NICS=127.0.0.1"]}


@pytest.mark.parametrize("device", sorted(PM_DEVICES))
@pytest.mark.parametrize("program", sorted(SMALL))
def test_each_mpi_version_over_pm_gives_the_sequential_result(program, device):
    seq = result_line([BUILD_BIN / f"{program}_seq", *SMALL[program]])
    # pml cm allows no transport of Open MPI's own: without the provider
    # pm, MPI_Init fails and so does the run.
    line = result_line([*MPIRUN, *OVER_PM, *PM_DEVICES[device],
                        BUILD_BIN / f"{program}_mpi", *SMALL[program], "--check"])
    assert line["checksum"] == seq["checksum"]
    assert line["ranks"] == 2
