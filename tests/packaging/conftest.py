"""Fixtures of the packaging tests: the packages built once per session by
scripts/make-deb.sh into directories of their own (this version and the next
one, for the upgrade), and a chroot of the node image to install them in."""

import concurrent.futures
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
MAKE_DEB = REPO / "scripts" / "make-deb.sh"
VERSION = subprocess.run(["dpkg-parsechangelog", "-l", str(REPO / "packaging/debian/changelog"),
                          "-S", "Version"], capture_output=True, text=True,
                         check=True).stdout.strip()
PACKAGES = ("libpm0", "libpm-dev", "pm-tools", "scored", "score-client", "libfabric-pm",
            "slurm-spank-score", "libpmdsm0", "libpmdsm-dev")
BUILD_TIMEOUT = 1200


def make_deb(version=None):
    """A make-deb.sh run into a fresh directory (of `version`, or the
    changelog's); returns (its output directory, {package: .deb path})."""
    out = Path(tempfile.mkdtemp(prefix="score-deb-", dir=REPO / "build"))
    env = dict(os.environ, DEB_OUT=str(out))
    if version:
        env["DEB_VERSION"] = version
    proc = subprocess.run([str(MAKE_DEB)], env=env, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The -dbgsym packages (detached debug symbols) are built too.
    found = {p.name.split("_")[0]: p for p in out.glob("*.deb")
             if not p.name.split("_")[0].endswith("-dbgsym")}
    return out, found


class PendingBuild:
    """A make_deb() run in a thread of its own, started at once, so that
    the build runs while the tests do work that does not need it yet (the
    cluster test brings up its nodes meanwhile); result() waits for it."""

    def __init__(self, version=None):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(make_deb, version)

    def result(self):
        """(its output directory, {package: .deb path}), once built; a
        failed build raises here."""
        return self._future.result(timeout=BUILD_TIMEOUT)

    def close(self):
        """Wait for the build (a make-deb.sh run is not interrupted
        half-way) and remove what it made."""
        self._pool.shutdown(wait=True)
        if self._future.exception() is None:
            shutil.rmtree(self._future.result()[0], ignore_errors=True)


@pytest.fixture(scope="session")
def debs():
    """The packages of the changelog's version, building from the moment a
    test asks for them: a PendingBuild (result(): (directory, {package:
    path}))."""
    pending = PendingBuild()
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
        subprocess.run(["dpkg-deb", "-b", str(tree), str(target)], check=True,
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
    the test's own.  Every command runs in a mount namespace of its own in
    which the overlay, /proc, /dev, /run and /tmp are mounted and the
    local repository `repo` is bound at /srv/score-repo; when the command
    ends, its namespace and every mount in it go with it, so nothing is
    left mounted, whatever happens."""

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
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--",
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
