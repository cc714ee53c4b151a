"""Fixtures of the packaging tests: the packages built once per session by
scripts/make-deb.sh into directories of their own (this version and the next
one, for the upgrade), and a chroot of the node image to install them in.

The build starts as soon as the session knows it will need it (at the end
of collection), at the lowest priority but ahead of the runner's idle
builds (IdleJob's `ahead`): it takes the CPU the tests run before the
packaging tests leave unused (tests/conftest.py runs first the directories
that do not wait on message latency, packaging among them).  The first
test that waits for it raises it to the normal priority.  Under
scripts/run-tests the build started earlier still, before the first suite,
and the session adopts it (RunnerBuild)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from idle_job import IdleJob, hurry_session  # noqa: E402  (scripts/ is not a package)

MAKE_DEB = REPO / "scripts" / "make-deb.sh"
VERSION = subprocess.run(["dpkg-parsechangelog", "-l", str(REPO / "packaging/debian/changelog"),
                          "-S", "Version"], capture_output=True, text=True,
                         check=True).stdout.strip()
PACKAGES = ("libpm0", "libpm-dev", "pm-tools", "scored", "score-client", "libfabric-pm",
            "slurm-spank-score", "libpmdsm0", "libpmdsm-dev")
BUILD_TIMEOUT = 1200


def packages_in(out):
    """{package: .deb path} of a build's output directory, without the
    -dbgsym packages (detached debug symbols) it builds too."""
    return {p.name.split("_")[0]: p for p in out.glob("*.deb")
            if not p.name.split("_")[0].endswith("-dbgsym")}


class PendingBuild:
    """A make-deb.sh run (of the changelog's version) into a fresh
    directory, started at once at the lowest priority (an IdleJob, ahead),
    so that the build runs while the tests do other work;
    result() raises it to the normal priority and waits for it."""

    def __init__(self):
        self.out = Path(tempfile.mkdtemp(prefix="score-deb-", dir=REPO / "build"))
        # Ahead of the runner's idle builds (the Rust tests', needed only
        # at the end): the cluster test waits for the packages.
        self._job = IdleJob([str(MAKE_DEB)], env=dict(os.environ, DEB_OUT=str(self.out)),
                            separate_stderr=True, ahead=True)
        self._result = None

    def result(self):
        """(its output directory, {package: .deb path}) once built; a failed
        build raises here."""
        if self._result is None:
            status, _, stderr = self._job.result(timeout=BUILD_TIMEOUT)
            assert status == 0, stderr[-4000:]
            self._result = (self.out, packages_in(self.out))
        return self._result

    def close(self):
        """End the build if it still runs (no test waited for it: the
        session ended first; make-deb.sh starts its work tree afresh and
        cargo recovers from an interrupted build) and remove what it made."""
        self._job.kill()
        shutil.rmtree(self.out, ignore_errors=True)


class RunnerBuild:
    """The build scripts/run-tests started before its first suite
    (DebPrebuild), named in SCORE_DEB_PREBUILD as "session:directory": the
    packages go to directory/out, and directory/status gets make-deb.sh's
    exit status when it ends.  The runner owns the build (it ends it and
    removes the directory after the suite); the session raises it to the
    normal priority and waits for it, as for its own."""

    def __init__(self, sid, directory):
        self.sid, self.dir, self.out = sid, directory, directory / "out"
        self._result = None

    @classmethod
    def from_env(cls):
        """The runner's build, or None outside scripts/run-tests."""
        sid, sep, directory = os.environ.get("SCORE_DEB_PREBUILD", "").partition(":")
        if not sep or not sid.isdigit() or not Path(directory).is_dir():
            return None
        return cls(int(sid), Path(directory))

    def result(self):
        if self._result is None:
            hurry_session(self.sid)
            status_file, deadline = self.dir / "status", time.monotonic() + BUILD_TIMEOUT
            while not status_file.exists():
                assert time.monotonic() < deadline, \
                    f"make-deb.sh (scripts/run-tests' build) still runs after {BUILD_TIMEOUT} s"
                time.sleep(0.5)
            status = int(status_file.read_text())
            assert status == 0, (self.dir / "stderr").read_text()[-4000:]
            self._result = (self.out, packages_in(self.out))
        return self._result

    def close(self):
        """Nothing: the runner ends and removes its build."""


def _new_build():
    """scripts/run-tests' build when the session runs under it, else one
    of its own, started now."""
    return RunnerBuild.from_env() or PendingBuild()


# The session's build, started by pytest_collection_finish when a collected
# test needs the packages; the fixture `debs` owns it from then on.
_early_build = None


def pytest_collection_finish(session):
    global _early_build
    if _early_build is None and any("debs" in getattr(item, "fixturenames", ())
                                    for item in session.items):
        _early_build = _new_build()


def pytest_sessionfinish(session):
    """A build no test came to own (the session ended first) is ended and
    removed all the same."""
    global _early_build
    if _early_build is not None:
        _early_build.close()
        _early_build = None


@pytest.fixture(scope="session")
def debs():
    """The packages of the changelog's version, building from the end of
    the collection (or from now), or scripts/run-tests' build: a
    PendingBuild or a RunnerBuild (result(): (directory, {package: path}))."""
    global _early_build
    pending, _early_build = _early_build or _new_build(), None
    try:
        yield pending
    finally:
        pending.close()


NEXT_VERSION = VERSION + "+1"


def repack(debs_dir, found, version):
    """The packages in `found` as `version`: each unpacked, its control
    file's Version (and the exact-version dependencies between our own
    packages) changed, packed again, and a flat repository of them.  An
    upgrade to them runs the same maintainer scripts and conffile handling
    as one to a rebuild of the same tree (make-deb.sh's DEB_VERSION), which
    is all the upgrade tests look at, without compiling everything a second
    time (about two minutes of the test suite)."""
    out = Path(tempfile.mkdtemp(prefix="score-deb-", dir=REPO / "build"))
    result = {}
    for pkg, deb in found.items():
        arch = deb.name.rsplit("_", 1)[1][:-len(".deb")]
        tree = out / f"{pkg}.tree"
        subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True, timeout=120)
        control = tree / "DEBIAN" / "control"
        text = control.read_text().replace(f"(= {VERSION})", f"(= {version})")
        lines = [f"Version: {version}" if line.startswith("Version: ") else line
                 for line in text.splitlines()]
        control.write_text("\n".join(lines) + "\n")
        target = out / f"{pkg}_{version}_{arch}.deb"
        # Compressed fast (gzip -1 rather than xz -6, 9 s less of the
        # suite): apt and dpkg read either, and nothing here looks at size.
        subprocess.run(["dpkg-deb", "-Zgzip", "-z1", "-b", str(tree), str(target)], check=True,
                       capture_output=True, timeout=300)
        shutil.rmtree(tree)
        result[pkg] = target
    repo = out / "repo"
    repo.mkdir()
    for deb in result.values():
        shutil.copy(deb, repo)
    subprocess.run("dpkg-scanpackages --multiversion . > Packages 2>/dev/null && "
                   "gzip -9kn Packages", shell=True, cwd=repo, check=True, timeout=120)
    return out, result


@pytest.fixture(scope="session")
def next_debs(debs):
    """The same packages as the next version, NEXT_VERSION (repack()):
    (directory, {package: path})."""
    out, found = repack(*debs.result(), NEXT_VERSION)
    try:
        yield out, found
    finally:
        shutil.rmtree(out, ignore_errors=True)




IMAGE_TIMEOUT = 1200
COMMAND_TIMEOUT = 600
VCLUSTER = REPO / "provisioning" / "vcluster" / "vcluster"


class Chroot:
    """A node's file system for package tests: the node image (vcluster
    image) as the read-only lower layer of an overlay whose upper layer is
    the test's own.  Every command runs in a mount and a PID namespace of
    its own in which the overlay, /proc, /dev, /run and /tmp are mounted
    and the local repository `repo` is bound at /srv/score-repo; when the
    command ends, its namespaces, every mount and every process in them go
    with it, so nothing is left mounted or running, whatever happens."""

    def __init__(self, image, workdir):
        self.image, self.workdir = Path(image), Path(workdir)
        for d in ("upper", "work", "root"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        self.repo = None

    @property
    def files(self):
        """The node's own changes (the overlay's upper layer)."""
        return self.workdir / "upper"

    def run(self, script, check=True, timeout=COMMAND_TIMEOUT):
        """Run shell `script` as root inside the node; returns the
        CompletedProcess (text, output captured)."""
        w = self.workdir
        setup = (f"set -e; R={w}/root; "
                 f"mount -t overlay overlay -o lowerdir={self.image},upperdir={w}/upper,"
                 f"workdir={w}/work $R; "
                 "mount -t proc proc $R/proc; mount --rbind /dev $R/dev; "
                 "mount -t tmpfs tmpfs $R/run; mount -t tmpfs tmpfs $R/tmp; ")
        if self.repo:
            setup += (f"mkdir -p $R/srv/score-repo; mount --bind {self.repo} $R/srv/score-repo; ")
        setup += 'exec chroot $R /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin ' \
                 'DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 /bin/sh -ec "$0"'
        # A PID namespace of its own: a maintainer script that stops a
        # daemon by its name (munge's prerm: start-stop-daemon --exec
        # /usr/sbin/munged) sees the node's processes, not the host's
        # munged or that of a test running at the same time (whose
        # daemon it would stop, or fail to), and nothing the node started
        # outlives it (when the namespace's PID 1, the script's shell,
        # exits, the kernel ends every process left in it).
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private",
                               "--pid", "--fork", "--kill-child", "--",
                               "/bin/sh", "-c", setup, script],
                              capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, f"{script}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc


@pytest.fixture(scope="session")
def node_image():
    proc = subprocess.run([str(VCLUSTER), "image"], capture_output=True, text=True,
                          timeout=IMAGE_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def chroot(node_image):
    workdir = Path(tempfile.mkdtemp(prefix="score-chroot-", dir=REPO / "build"))
    try:
        yield Chroot(node_image, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
