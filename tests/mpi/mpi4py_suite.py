"""mpi4py's own test suite over the provider pm, judged against libfabric's
tcp provider under the same Open MPI, the same exclusions (listed with their
reasons in mpi4py_runner.py) and the same layout: every test that passes
with tcp must pass with pm (tests/mpi/test_mpi4py.py under mpirun,
tests/scored/test_mpi_over_pm.py under scrun).

The tests come from mpi4py's source distribution on PyPI, version pinned to
Debian's python3-mpi4py (the module under test, built against Debian's Open
MPI) and checked by its SHA-256; it is downloaded once into BUILD/cache/.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from .mpijob import BUILD, PROVIDER_DIR, Run

MPI4PY_VERSION = "3.1.4"
MPI4PY_SHA256 = "17858f2ebc623220d0120d1fa8d428d033dde749c4bc35b33d81a66ad7f93480"
PYTHON = "/usr/bin/python3"
RUNNER = Path(__file__).resolve().parent / "mpi4py_runner.py"
SIMPLE_INDEX = "https://pypi.org/simple/mpi4py/"
# The whole suite takes some 10-30 s per run here; a hang (a regression, or
# a reference provider's) must not take the suite down with it, nor use up
# make test's half hour: 4 x the slowest run.
RUN_TIMEOUT = 120


def debian_mpi4py_version():
    proc = subprocess.run([PYTHON, "-c", "import mpi4py; print(mpi4py.__version__)"],
                          capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() if proc.returncode == 0 else None


def fetch_sdist(version, sha256):
    """mpi4py's source distribution `version`, checked by its SHA-256, from
    BUILD/cache (downloaded there once from PyPI's simple index)."""
    cache = BUILD / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"mpi4py-{version}.tar.gz"
    if not sdist.exists():
        # Its link on PyPI's simple index: `pip download` of an sdist builds
        # its metadata, which mpi4py 4's cannot without an MPI to build with.
        with urllib.request.urlopen(SIMPLE_INDEX, timeout=60) as r:
            page = r.read().decode()
        links = re.findall(rf'href="([^"#]*/{re.escape(sdist.name)})#', page)
        assert links, f"no {sdist.name} on {SIMPLE_INDEX}"
        with urllib.request.urlopen(links[0], timeout=300) as r:
            data = r.read()
        part = sdist.with_suffix(".part")
        part.write_bytes(data)
        part.rename(sdist)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != sha256:
        sdist.unlink()
        raise AssertionError(f"{sdist}: SHA-256 {digest}, want {sha256}")
    return sdist


@contextlib.contextmanager
def suite_dir(version=MPI4PY_VERSION, sha256=MPI4PY_SHA256):
    """test/ of mpi4py's pinned sdist, extracted into a temporary directory.
    The default is the version of Debian's python3-mpi4py (the module the
    Open MPI runs use), which must be installed."""
    if version == MPI4PY_VERSION:
        got = debian_mpi4py_version()
        assert got == MPI4PY_VERSION, \
            f"python3-mpi4py {MPI4PY_VERSION} is needed (found {got}): scripts/install-deps.sh"
    sdist = fetch_sdist(version, sha256)
    d = tempfile.mkdtemp(prefix="score-mpi4py-")
    try:
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers()
                       if m.name.startswith(f"mpi4py-{version}/test/") and m.isfile()]
            tar.extractall(d, members=members)
        yield Path(d) / f"mpi4py-{version}" / "test"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def provider_env(provider):
    """Open MPI's settings for a run over `provider`, the same for pm and
    tcp.  Ranks yield when idle: the layouts put up to 4 ranks on this
    machine's 2 cores, where busy-polling ranks starve each other (tcp took
    ten times longer than pm without it)."""
    env = {"OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "ofi",
           "OMPI_MCA_mtl_ofi_provider_include": provider,
           "OMPI_MCA_mpi_yield_when_idle": "1",
           "FI_PROVIDER_PATH": str(PROVIDER_DIR)}
    return env


def provider_args(provider):
    """provider_env() as mpirun arguments."""
    return [a for k, v in provider_env(provider).items() for a in ("-x", f"{k}={v}")]


class Outcome:
    def __init__(self, what, run, outdir, nranks):
        self.what = what
        self.reports = {}
        for r in range(nranks):
            path = Path(outdir) / f"rank-{r}.json"
            if path.exists():
                self.reports[r] = json.loads(path.read_text())
        tails = {p.name: p.read_text().splitlines()[-1:] for p in Path(outdir).glob("rank-*.log")}
        assert len(self.reports) == nranks, \
            f"{what}: {len(self.reports)}/{nranks} ranks reported; last test of each: " \
            f"{tails}\n{run.describe()}"

    def passed(self):
        """Tests that passed on every rank."""
        sets = [set(r["passed"]) for r in self.reports.values()]
        return set.intersection(*sets)

    def broken(self):
        return {t for r in self.reports.values() for t in r["failed"] + r["errors"]}

    def details(self):
        return [d for r in self.reports.values() for d in r["details"]][:10]


def run_suite(testdir, argv_prefix, what, nranks, env=None, start=None, only=None,
              python=PYTHON):
    """The suite under `argv_prefix` (mpirun ...); `start(argv)` -> an object
    with wait() and describe() runs it another way (scrun); `only`: a
    regular expression that keeps the test ids it matches; `python`: the
    interpreter whose mpi4py runs it."""
    outdir = tempfile.mkdtemp(prefix="score-mpi4py-out-")
    os.chmod(outdir, 0o777)
    try:
        argv = [*argv_prefix, python, RUNNER, testdir, outdir, *([only] if only else [])]
        run = start(argv) if start else Run(argv, env=env, timeout=RUN_TIMEOUT).wait()
        return Outcome(what, run, outdir, nranks)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def assert_pm_passes_what_tcp_passes(pm, tcp):
    missing = sorted(tcp.passed() - pm.passed())
    assert not missing, \
        f"{len(missing)} tests pass with tcp and not with pm: {missing[:20]}\n{pm.details()}"
    assert len(pm.passed()) > 1000, f"only {len(pm.passed())} tests passed: the suite did not run"
    print(f"\n{pm.what}: {len(pm.passed())} passed (tcp {len(tcp.passed())}); "
          f"failed or errors: pm {len(pm.broken())}, tcp {len(tcp.broken())}, "
          f"with pm only {sorted(pm.broken() - tcp.broken())}")
