"""MPICH over the provider pm (issue 12, M3): the `mpich` wheel from PyPI,
version pinned and checked by its SHA-256, installed once into a venv under
BUILD (reused by later runs), and the environment that runs its programs
over PM (docs/mpi/guide.md, "MPICH").

The wheel is MPICH's ch4 device with an ofi netmod and its own libfabric
(2.5.1), which loads external providers from FI_PROVIDER_PATH; its launcher
is hydra's `mpiexec`, which speaks PMI, not PMIx, so the provider opens
detached PM contexts (shm within a host, udp between hosts) whose peers
come from fi_av_insert.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .mpijob import BUILD, PROVIDER_DIR
from .wheels import fetch_wheel, pip_install, venv_with_wheel

MPICH_VERSION = "5.0.2"
MPICH_WHEEL = f"mpich-{MPICH_VERSION}-py3-none-manylinux_2_28_x86_64.whl"
MPICH_SHA256 = "8fed465ebff269ea2ebac179a25de02671ddf8df476e0f115be089015015cfd4"
VENV = BUILD / f"mpich-{MPICH_VERSION}"
# mpi4py for that MPICH: Debian's 3.1.4 does not load against MPICH 5
# (undefined symbol MPI_UNWEIGHTED); PyPI's 4.1.1 wheel finds the MPICH of
# its venv.  Its test suite comes from the sdist of the same version.
MPI4PY_VERSION = "4.1.1"
MPI4PY_WHEEL = f"mpi4py-{MPI4PY_VERSION}-cp311-cp311-manylinux1_x86_64.manylinux_2_5_x86_64.whl"
MPI4PY_WHEEL_SHA256 = "a753d5d61b46f90260247f344a6c57c527a6a4e7bea126830120ab41c3d057e5"
MPI4PY_SDIST_SHA256 = "eb2c8489bdbc47fdc6b26ca7576e927a11b070b6de196a443132766b3d0a2a22"

# What makes the wheel's MPICH run over pm.  Its libfabric asks API 2.5,
# which the provider implements (design.md §1; MPICH_API_1_18 asks 1.18
# instead, as scrun did before).  MPICH builds its request from the answer
# to NULL hints, which offers no RMA or atomics (the provider gives them
# only to hints with its mr_mode): these say it up front, and MPI one-sided
# goes through MPICH's active messages (FI_MSG + FI_MULTI_RECV).  NOLOCAL
# keeps MPICH's own shared memory out, so ranks on one node talk through
# the netmod too.
MPICH_ENV = {
    "FI_PROVIDER": "pm",
    "FI_PROVIDER_PATH": str(PROVIDER_DIR),
    "MPIR_CVAR_CH4_NETMOD": "ofi",
    "MPIR_CVAR_NOLOCAL": "1",
    "MPIR_CVAR_CH4_OFI_ENABLE_RMA": "0",
    "MPIR_CVAR_CH4_OFI_ENABLE_ATOMICS": "0",
}
MPICH_API_1_18 = {
    "MPIR_CVAR_CH4_OFI_MAJOR_VERSION": "1",
    "MPIR_CVAR_CH4_OFI_MINOR_VERSION": "18",
}


def mpich_env(**extra):
    """os.environ without any PMIx server (MPICH is launched by hydra),
    plus MPICH_ENV and extra (PM's knobs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMIX_", "OMPI_"))}
    env.update(MPICH_ENV)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _check(venv):
    out = subprocess.run([str(venv / "bin" / "mpichversion")], capture_output=True, text=True,
                         timeout=30).stdout
    assert f"MPICH Version:      {MPICH_VERSION}" in out and "ofi" in out, out


def install():
    """The venv with the pinned wheel (made once, reused while it is whole):
    returns its directory."""
    return venv_with_wheel(VENV, "mpich", MPICH_VERSION, MPICH_WHEEL, MPICH_SHA256, _check)


def install_mpi4py(venv):
    """mpi4py's pinned wheel in the MPICH venv (once): its python."""
    marker = venv / ".mpi4py-installed"
    python = venv / "bin" / "python"
    if marker.exists() and marker.read_text().strip() == MPI4PY_WHEEL_SHA256:
        return python
    pip_install(venv, fetch_wheel("mpi4py", MPI4PY_VERSION, MPI4PY_WHEEL, MPI4PY_WHEEL_SHA256))
    out = subprocess.run([str(python), "-c", "from mpi4py import MPI; "
                          "print(MPI.Get_library_version())"],
                         capture_output=True, text=True, timeout=60, env=mpich_env())
    assert f"MPICH Version:      {MPICH_VERSION}" in out.stdout, out.stdout + out.stderr
    marker.write_text(MPI4PY_WHEEL_SHA256 + "\n")
    return python


@contextlib.contextmanager
def rsh_script(vc, vcluster):
    """hydra's ssh launcher for the virtual cluster vc: a script that execs
    `vcluster rsh --name C "$@"` (-launcher ssh -launcher-exec); removed on
    exit."""
    d = Path(tempfile.mkdtemp(prefix="score-mpich-rsh-"))
    try:
        script = d / "rsh"
        script.write_text(f'#!/bin/sh\nexec {vcluster} rsh --name {vc.name} "$@"\n')
        os.chmod(script, 0o755)
        yield script
    finally:
        shutil.rmtree(d, ignore_errors=True)


def hydra_across(mpich, vc, rsh, ppn, nodes=None):
    """The wheel's mpiexec over `nodes` of vc (all by default), ppn ranks
    each, hydra's own traffic on net 0; the caller adds the program."""
    nodes = list(nodes or vc.nodes)
    return [mpich / "bin" / "mpiexec", "-launcher", "ssh", "-launcher-exec", rsh,
            "-iface", vc.bridge(0), "-hosts", ",".join(nodes),
            "-n", len(nodes) * ppn, "-ppn", ppn]
