"""The apt proxy of a root-file-system cluster: the nodes' only way to packages.

Nodes have no route out of their networks.  Their apt goes through one
apt-cacher-ng (Debian's caching proxy) that runs on the host, bound to the
host's address on network 0, port PORT:

  - Debian's archive: apt-cacher-ng fetches from the archive the host's apt
    uses (its `backends_debian`; the package's default redirect fails here)
    and keeps what it fetched in CACHE, shared by every cluster and kept
    across `down`, so a second cluster installs from the cache;
  - the project's packages: the local repository that `make deb` builds
    (build/deb/repo) is served as http://HOST:PORT/score/ (LocalDirs), a
    flat repository the nodes list as `deb [trusted=yes] ... ./`.

The archive's answers carry no Last-Modified here, and apt-cacher-ng 3.7
fetches an index (InRelease) anew for every request; two such refreshes
of one file in the same second fail (its old copy is moved aside under a
name with the second in it), and the node whose request failed hangs in
apt.  So the inventory has the nodes update their lists in turn
(score_apt_update_throttle, inventory.py).

Its configuration, log and PID file live in /run/score/vcluster/NAME/apt/;
`down` finds the daemon by that path on its command line (score.classify)
and stops it with the cluster's other services.
"""

import os
import socket
import subprocess
import time

from . import image, score, system
from .errors import VclusterError

# Not the package's own 3142: a system apt-cacher-ng may listen there on every
# address, and ours binds only the cluster's bridge.
PORT = 9142
CACHE = "/var/cache/score/vcluster/apt"
REPO_PATH = "score"
READY_TIMEOUT = 15.0
DEFAULT_REPO = score.REPO_ROOT / "build" / "deb" / "repo"


def conf_dir(name):
    return score.service_dir(name) / "apt"


def proxy_url(address):
    return f"http://{address}:{PORT}"


def repo_line(address):
    """The node's sources.list line for the project's packages."""
    return f"deb [trusted=yes] {proxy_url(address)}/{REPO_PATH}/ ./"


def node_apt_files(address, with_repo):
    """{path inside the node: text} that point the node's apt at the proxy."""
    files = {
        "etc/apt/apt.conf.d/01vcluster-proxy":
            f'Acquire::http::Proxy "{proxy_url(address)}";\n'
            # The local repository is the proxy itself: no detour.
            f'Acquire::http::Proxy::{address} "DIRECT";\n'
            # No recommends: a node gets what it asks for, as the image did.
            'APT::Install-Recommends "false";\n',
    }
    if with_repo:
        files["etc/apt/sources.list.d/score.list"] = repo_line(address) + "\n"
    return files


def _config(name, address, repo, archive=None):
    main, security = image.host_archive()
    main = archive or main
    d = conf_dir(name)
    lines = [
        f"CacheDir: {CACHE}",
        f"LogDir: {d}",
        "SupportDir: /usr/lib/apt-cacher-ng",
        f"Port: {PORT}",
        f"BindAddress: {address}",
        f"PidFile: {d}/apt-cacher-ng.pid",
        "ForeGround: 1",
        # Debian's archive, by whatever name a node's sources use, from the
        # archive the host uses; the security archive likewise.
        "Remap-debrep: file:deb_mirror*.gz /debian ; file:backends_debian",
        f"Remap-secdeb: security.debian.org deb.debian.org/debian-security ; {security}",
        "ExThreshold: 4",
        "FollowIndexFileRemoval: 1",
        # Nothing but the archives: no CONNECT tunnels, no other sites.
        "PassThroughPattern: ^$",
    ]
    if repo:
        lines.append(f"LocalDirs: {REPO_PATH} {repo}")
    return "\n".join(lines) + "\n", main + "/\n"


def start(name, address, repo=None, archive=None, timeout=READY_TIMEOUT):
    """Start the cluster's proxy on `address`; returns its PID once it
    answers.  `repo`: a directory with a flat repository (Packages), or None;
    `archive`: the Debian archive to fetch from (default: the host's)."""
    acng = system.tool("apt-cacher-ng")
    if repo is not None and not os.path.isfile(os.path.join(repo, "Packages")):
        raise VclusterError(f"{repo} is not an apt repository (no Packages file); "
                            "build one with 'make deb'")
    d = conf_dir(name)
    d.mkdir(parents=True, exist_ok=True)
    os.makedirs(CACHE, mode=0o755, exist_ok=True)
    conf, backend = _config(name, address, repo, archive)
    (d / "acng.conf").write_text(conf)
    (d / "backends_debian").write_text(backend)
    log_path = d / "apt-cacher-ng.console"
    proc = score.start_daemon([acng, "-c", str(d)], log_path, "apt-cacher-ng")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise VclusterError(f"apt-cacher-ng exited with status {proc.returncode} at start: "
                                + score.tail_of(log_path))
        try:
            with socket.create_connection((address, PORT), timeout=1):
                return proc.pid
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise VclusterError(f"apt-cacher-ng did not listen on {address}:{PORT} within {timeout:g} s: "
                        + score.tail_of(log_path))


def check(address):
    """Raise unless the proxy answers on `address` (e.g. before installing)."""
    try:
        with socket.create_connection((address, PORT), timeout=3):
            return
    except OSError as e:
        raise VclusterError(f"the cluster's apt proxy at {address}:{PORT} does not answer "
                            f"({e.strerror or e}); 'vcluster down' and 'up --rootfs' again") from None


def fetch_check(address, archive=None, path="/debian/dists/bookworm/InRelease"):
    """Whether the proxy can reach the Debian archive: one small request."""
    argv = [system.tool("python3"), "-c",
            "import sys, urllib.request\n"
            "p = urllib.request.ProxyHandler({'http': sys.argv[1]})\n"
            "urllib.request.build_opener(p).open(sys.argv[2], timeout=20).read(64)\n",
            proxy_url(address), "http://deb.debian.org" + path]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise VclusterError("the apt proxy cannot reach the Debian archive "
                            f"({archive or image.host_archive()[0]}): "
                            + (proc.stderr.strip().splitlines() or ["no message"])[-1])
