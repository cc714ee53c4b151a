"""The Debian image that root-file-system nodes run (`vcluster up --rootfs`).

One directory tree of Debian bookworm, built once with mmdebstrap and kept
in IMAGES/<key>/ until its recipe changes: the key is a hash of everything
that shapes it (suite, archive, variant, package list, hooks, this module's
format version), so a changed package list builds a new image and an old one
is never used by mistake.  Nodes mount it read-only as the lower layer of an
overlay; it is never written after it is built.

The package lists are fetched in the image (apt-get update), so nodes do not
each download them.  A build goes to IMAGES/.<key>.partial-<pid> and is
renamed into place only when complete: an interrupted or failed build leaves
no image behind (and the next build removes its leftovers).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from . import log, system
from .errors import VclusterError

IMAGES = "/var/cache/score/vcluster/images"
SUITE = "bookworm"
VARIANT = "minbase"
# What a node needs to be a node (ssh, systemd as PID 1) and Ansible's apt
# module needs (python3-apt); everything else comes from packages later.
PACKAGES = ("dbus", "iproute2", "iputils-ping", "openssh-server", "procps", "python3",
            "python3-apt", "sudo", "systemd", "systemd-sysv")
# The image's format; bump it when the recipe changes in a way the key misses.
FORMAT = 1
# Free space needed to build (the image is about 300 MB, apt's downloads too).
NEEDED_BYTES = 1 << 30
BUILD_TIMEOUT = 1800


def host_archive():
    """The Debian archive and security archive the host's apt uses, as
    (main URI, security URI); Debian's defaults if the host says nothing."""
    main, security = "http://deb.debian.org/debian", "http://deb.debian.org/debian-security"
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            text = open(path).read()
        except OSError:
            continue
        for word in text.split():
            if word.startswith("http") and word.rstrip("/").endswith("debian-security"):
                security = word.rstrip("/")
            elif word.startswith("http") and word.rstrip("/").endswith("/debian"):
                main = word.rstrip("/")
    return main, security


def recipe(main=None, security=None):
    """Everything that shapes the image, as a dict (its hash is the key)."""
    host_main, host_security = host_archive()
    main, security = main or host_main, security or host_security
    return {"format": FORMAT, "suite": SUITE, "variant": VARIANT,
            "packages": sorted(PACKAGES),
            "sources": [f"deb {main} {SUITE} main", f"deb {main} {SUITE}-updates main",
                        f"deb {security} {SUITE}-security main"]}


def key(r):
    return hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]


def path_of(r):
    return os.path.join(IMAGES, f"{SUITE}-{key(r)}")


def ensure(rebuild=False, main=None, security=None):
    """The image's directory, built first if it is not there (or if
    `rebuild`); returns (path, built now?)."""
    system.require_root()
    r = recipe(main, security)
    path = path_of(r)
    if os.path.isdir(path) and not rebuild:
        _check(path)
        return path, False
    mmdebstrap = system.tool("mmdebstrap")
    os.makedirs(IMAGES, mode=0o755, exist_ok=True)
    _remove_partials()
    free = shutil.disk_usage(IMAGES).free
    if free < NEEDED_BYTES:
        raise VclusterError(f"not enough free space in {IMAGES} to build the image: "
                            f"{free >> 20} MiB free, {NEEDED_BYTES >> 20} MiB needed")
    partial = os.path.join(IMAGES, f".{os.path.basename(path)}.partial-{os.getpid()}")
    argv = [mmdebstrap, f"--variant={VARIANT}", "--include=" + ",".join(r["packages"]),
            # Nodes get the package lists with the image (apt-get update is
            # run inside, then the lists are kept).
            "--skip=cleanup/apt/lists",
            "--customize-hook=chroot \"$1\" apt-get update -q",
            # A node's identity is made per node at start: no machine id, no
            # ssh host keys in the image.
            "--customize-hook=rm -f \"$1\"/etc/ssh/ssh_host_*",
            "--customize-hook=truncate -s 0 \"$1\"/etc/machine-id",
            SUITE, partial] + r["sources"]
    log.step(f"building the node image {os.path.basename(path)} with mmdebstrap "
             f"({SUITE}, {len(r['packages'])} packages; about a minute)")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(partial, ignore_errors=True)
        raise VclusterError(f"building the image took more than {BUILD_TIMEOUT} s; "
                            "nothing was kept") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise VclusterError("building the image failed; nothing was kept. mmdebstrap said: "
                            + _explain(proc.stderr))
    with open(os.path.join(partial, "etc", "vcluster-image.json"), "w") as f:
        json.dump(dict(r, key=key(r)), f, indent=2, sort_keys=True)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.rename(partial, path)
    log.step(f"image {path} built in {time.monotonic() - t0:.0f} s")
    return path, True


def _check(path):
    if not os.path.isfile(os.path.join(path, "etc", "vcluster-image.json")):
        raise VclusterError(f"{path} is not a complete vcluster image; remove it "
                            "(vcluster image --rebuild)")


def _remove_partials():
    for name in os.listdir(IMAGES):
        if ".partial-" in name:
            pid = name.rsplit("-", 1)[1]
            if not pid.isdigit() or not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(os.path.join(IMAGES, name), ignore_errors=True)


def _explain(stderr):
    """The lines of mmdebstrap's output that say what went wrong."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith(("E:", "W:", "Err:"))
             or "No space left" in ln or "Could not resolve" in ln or "Failed to fetch" in ln]
    text = " | ".join(lines[-6:]) or stderr.strip()[-600:]
    if "No space left" in stderr:
        text += f" (the disk of {IMAGES} is full)"
    if re.search(r"^Err:\d+ |Could not resolve|Could not connect|Unable to connect|"
                 r"Failed to fetch|Temporary failure resolving", stderr, re.M):
        text += " (the Debian archive is unreachable from this machine)"
    return text


def list_images():
    """[(path, recipe dict)] of the images built, newest first."""
    found = []
    if not os.path.isdir(IMAGES):
        return found
    for name in os.listdir(IMAGES):
        meta = os.path.join(IMAGES, name, "etc", "vcluster-image.json")
        if os.path.isfile(meta):
            with open(meta) as f:
                found.append((os.path.join(IMAGES, name), json.load(f)))
    found.sort(key=lambda e: os.path.getmtime(e[0]), reverse=True)
    return found
