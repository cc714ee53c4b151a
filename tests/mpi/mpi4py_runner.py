"""mpi4py's own test suite, run in every rank of an MPI job.

    mpirun -n 2 python3 mpi4py_runner.py TESTDIR OUTDIR [REGEX]

TESTDIR is test/ of the pinned mpi4py source distribution; the mpi4py
module is Debian's python3-mpi4py of the same version (built against
Debian's Open MPI).  Every rank runs the same tests in the same order (they
are collective), minus EXCLUDED, and writes OUTDIR/rank-N.json:
{"rank", "size", "passed": [ids], "failed": [ids], "errors": [ids],
"skipped": n}, and OUTDIR/rank-N.log, a line per test (the last one names a
test that hung).  REGEX keeps only the test ids it matches (to look at one
test).  The exclusions apply to every provider alike; each says why.
"""
import json
import os
import re
import sys
import unittest
from pathlib import Path

# The suite's array tests run once per array library it finds; numpy (which
# Debian's python3-matplotlib, a benchmark dependency, pulls in) multiplies
# them several times over and the run no longer fits the test budget.  The
# runs stay on array.array and bytes, as on a machine without numpy, the same
# for every provider.
sys.modules["numpy"] = None

# Modules left out whole: {module: reason}.
EXCLUDED_MODULES = {
    "test_dynproc": "MPI_Comm_spawn/connect/accept: dynamic processes need a runtime "
                    "that starts them (neither scrun nor this test gives one)",
    "test_spawn": "MPI_Comm_spawn: as test_dynproc",
}
# Tests left out, by a regular expression on the test id: {regex: reason}.
SSEND_MPROBE = ("a synchronous send received with a matched probe (MPI_Mprobe + "
                "MPI_Mrecv, which mpi4py's pickled recv uses) is never acknowledged by "
                "Open MPI 4.1.4's mtl ofi, so the send never completes and the test "
                "hangs, with libfabric's tcp provider as with pm (tests/programs have "
                "no such case; ob1 completes it)")
EXCLUDED_TESTS = {
    r"\.testAlltoallwBottom$":
        "Open MPI 4.1.4 with pml cm segfaults in PMPI_Alltoallw with MPI_BOTTOM, "
        "with libfabric's tcp provider as with pm (ob1 takes another path)",
    r"^test_p2p_obj\..*\.testCancel$":
        "cancelling an issend in Open MPI 4.1.4's mtl ofi (it cannot cancel sends) "
        "crashes or fails after the issend tests, with tcp as with pm",
    r"^test_p2p_obj\..*\.(testISSendAndRecv|testSSendAndRecv|testProbe|testTestSomeSend"
    r"|testWaitSomeSend)$": SSEND_MPROBE,
    r"^test_util_pkl5\..*\.(testISSendAndRecv|testISSendCancel|testMProbe"
    r"|testMessageProbeIProbe|testProbe|testSSendAndMProbe|testSSendAndRecv|testTestAll"
    r"|testWaitAll|testIMProbe)$": SSEND_MPROBE,
}

# Left out too when one-sided MPI goes through btl ofi + osc rdma
# (OMPI_MCA_osc=rdma), again for every provider alike.
# Left out too when the MPI is MPICH, for every provider alike.
EXCLUDED_MPICH = {
    r"^test_comm_topo\..*\.testDistgraphcomm$":
        "MPICH 5.0.2's MPI_Dist_graph_create probes with MPI_ANY_SOURCE and then "
        "receives with MPI_ANY_SOURCE, sizing the buffer by the probe: when the "
        "message of another rank is there before the rank's own, it counts an edge "
        "too many (MPI guarantees the probed message only to a receive from the "
        "probed source); by hand it does so with libfabric's tcp provider too "
        "(2 rounds of 200), with pm almost always, since its messages arrive sooner",
    r"^test_util_sync\.(TestSemaphore|TestMutex(Basic|Recursive)World"
    r"|TestCondition(Mutex)?World)":
        "mpi4py.util.sync's semaphore, mutex and condition wait in a spin loop for "
        "another rank's passive-target atomics, which MPICH carries as active "
        "messages here (RMA off in the ofi netmod, docs/mpi/guide.md): with the "
        "wheel's own tcp provider it hung in TestSemaphore's testAcquireRelease "
        "across 2 nodes and in TestMutexRecursiveWorld's on one node x 2, until the "
        "run's timeout (CI, 2026-11-29, once each); the same MPICH path serves pm. "
        "Their Self variants (one rank) stay, but the semaphore's",
}
EXCLUDED_OSC_RDMA = {
    r"\.testCompareAndSwap$":
        "MPI_Compare_and_swap through osc rdma segfaults inside Open MPI 4.1.4's "
        "mca_btl_ofi_acswap (a NULL local registration handle for the result), "
        "with libfabric's sockets provider as with pm, before any call reaches "
        "the provider",
}
if os.environ.get("OMPI_MCA_osc") == "rdma":
    EXCLUDED_TESTS.update(EXCLUDED_OSC_RDMA)


def cases(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from cases(t)
        else:
            yield t


class Collect(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test.id())


def main():
    testdir, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    only = re.compile(sys.argv[3]).search if len(sys.argv) > 3 else (lambda _: True)
    sys.path.insert(0, str(testdir))
    from mpi4py import MPI  # noqa: E402  (after the path: mpiunittest lives there)

    if MPI.Get_library_version().startswith("MPICH"):
        EXCLUDED_TESTS.update(EXCLUDED_MPICH)
    excluded = re.compile("|".join(f"(?:{r})" for r in EXCLUDED_TESTS)).search
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for path in sorted(testdir.glob("test_*.py")):
        if path.stem in EXCLUDED_MODULES:
            continue
        for case in cases(loader.loadTestsFromName(path.stem)):
            if not excluded(case.id()) and only(case.id()):
                suite.addTest(case)
    rank = MPI.COMM_WORLD.Get_rank()
    # Each rank's progress, one line a test: the last line names a test that hung.
    with open(outdir / f"rank-{rank}.log", "w", buffering=1) as log:
        result = unittest.TextTestRunner(stream=log, verbosity=2, resultclass=Collect).run(suite)
    report = {
        "rank": rank,
        "size": MPI.COMM_WORLD.Get_size(),
        "passed": result.passed,
        "failed": [t.id() for t, _ in result.failures],
        "errors": [t.id() for t, _ in result.errors],
        "skipped": len(result.skipped),
        "details": [f"{t.id()}: {tb[-600:]}" for t, tb in result.failures + result.errors],
    }
    (outdir / f"rank-{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
