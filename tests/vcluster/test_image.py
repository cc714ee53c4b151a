"""`vcluster image`: the Debian image of root-file-system nodes is built once
with mmdebstrap, reused while its recipe holds, carries no per-node
identity, and a build that cannot finish keeps nothing."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import VCLUSTER

IMAGES = Path("/var/cache/score/vcluster/images")
# A cold build downloads about 100 MB and unpacks them.
BUILD_TIMEOUT = 1200


@pytest.fixture(autouse=True)
def _root(require_root):
    pass


def image(*args, timeout=BUILD_TIMEOUT):
    return subprocess.run([str(VCLUSTER), "image", *args], capture_output=True, text=True,
                          timeout=timeout)


def entries():
    return set(os.listdir(IMAGES)) if IMAGES.is_dir() else set()


def test_the_image_is_built_once_then_reused():
    first = image("--json")
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    root = Path(made["path"])
    assert root.parent == IMAGES and root.is_dir()
    if made["built"]:
        assert "building the node image" in first.stderr, first.stderr
    # Again: the same image, not built again.
    again = image("--json", timeout=60)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == dict(made, built=False)
    assert "building" not in again.stderr
    # What it records is its recipe, and its name is the recipe's key.
    meta = json.loads((root / "etc" / "vcluster-image.json").read_text())
    assert meta["packages"] == made["recipe"]["packages"]
    assert root.name == f"{meta['suite']}-{meta['key']}"
    listed = image("--list", timeout=60)
    assert str(root) in listed.stdout, listed.stdout


def test_the_image_holds_a_node_without_an_identity():
    proc = image(timeout=BUILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    root = Path(proc.stdout.strip())
    status = (root / "var/lib/dpkg/status").read_text()
    for pkg in ("systemd", "openssh-server", "python3-apt", "sudo", "iproute2"):
        assert f"Package: {pkg}\nStatus: install ok installed" in status, pkg
    # Package lists come with the image, so nodes need not fetch them.
    lists = list((root / "var/lib/apt/lists").glob("*_Packages"))
    assert lists, "no package lists in the image"
    # Identity is made per node: no ssh host keys, an empty machine id.
    assert not list((root / "etc/ssh").glob("ssh_host_*"))
    assert (root / "etc/machine-id").read_text() == ""


def test_an_unreachable_archive_is_a_clear_error_and_keeps_nothing():
    before = entries()
    proc = image("--mirror", "http://127.0.0.1:9/debian", timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "building the image failed; nothing was kept" in proc.stderr, proc.stderr
    assert "the Debian archive is unreachable from this machine" in proc.stderr, proc.stderr
    assert entries() == before


def test_image_help_says_what_it_builds():
    proc = image("--help", timeout=60)
    assert proc.returncode == 0
    assert "mmdebstrap" in proc.stdout and "/var/cache/score/vcluster/images" in proc.stdout
