"""The packages on a node (docs/admin/packages.md): installed with apt from
the local repository into the node image (a chroot of it: no systemd runs
there, so starting the units is for the root-file-system nodes), the units
pass systemd-analyze verify, an upgrade to a rebuilt higher version keeps an
edited /etc/score/scored.toml, and purging leaves nothing of score."""

from .conftest import NEXT_VERSION, VERSION

SOURCES = "echo 'deb [trusted=yes] file:/srv/score-repo ./' > /etc/apt/sources.list.d/score.list"
# What the packages may leave once purged: apt's and dpkg's own records.
RECORDS = ("var/lib/apt/lists/", "var/cache/apt/", "var/log/", "var/lib/dpkg/",
           "etc/apt/sources.list.d/score.list", "srv/score-repo", "var/cache/debconf/",
           "var/cache/man/", "var/lib/systemd/deb-systemd-helper-")


def test_install_verify_upgrade_and_purge(chroot, debs, next_debs):
    chroot.repo = debs.result()[0] / "repo"
    chroot.run(f"{SOURCES} && apt-get update -q")
    # man-db, so that systemd-analyze can check the units' man: links.
    chroot.run("apt-get install -y -q --no-install-recommends scored score-client pm-tools "
               "man-db")

    # Installed from the repository, library dependencies pulled from Debian.
    out = chroot.run("dpkg-query -W -f '${Package} ${Version}\\n' scored score-client pm-tools "
                     "libpm0 libmunge2 munge").stdout
    for pkg in ("scored", "score-client", "pm-tools", "libpm0"):
        assert f"{pkg} {VERSION}\n" in out, out
    assert "libmunge2 " in out and "munge " in out, out

    # scrun is ours, through the alternatives system; man pages resolve.
    out = chroot.run("readlink -f /usr/bin/scrun; scrun --version; scorectl --version; "
                     "pminfo --version; man -w scrun scorectl pminfo scored").stdout.split("\n")
    assert out[:4] == ["/usr/lib/score/bin/scrun", f"scrun {VERSION}", f"scorectl {VERSION}",
                       VERSION], out
    # scrun(1) is the alternative's link to score-scrun(1), which man -w follows.
    man = "/usr/share/man/man"
    assert out[4:8] == [f"{man}1/score-scrun.1.gz", f"{man}1/scorectl.1.gz",
                        f"{man}1/pminfo.1.gz", f"{man}8/scored.8.gz"], out

    # The units as installed.
    verify = chroot.run("systemd-analyze verify /lib/systemd/system/scored-master.service "
                        "/lib/systemd/system/scored-agent.service 2>&1", check=False)
    assert verify.returncode == 0, verify.stdout
    assert "scored" not in verify.stdout, verify.stdout

    # The administrator edits the configuration; the upgrade keeps it.
    chroot.run("sed -i 's/^quantum_ms = 500$/quantum_ms = 250/' /etc/score/scored.toml && "
               "grep -qx 'quantum_ms = 250' /etc/score/scored.toml")
    chroot.repo = next_debs[0] / "repo"
    chroot.run("apt-get update -q && apt-get install -y -q --only-upgrade scored score-client "
               "pm-tools libpm0")
    out = chroot.run("dpkg-query -W -f '${Version}\\n' scored score-client pm-tools libpm0; "
                     "grep -c '^quantum_ms = 250$' /etc/score/scored.toml; "
                     "readlink -f /usr/bin/scrun").stdout.split()
    assert out == [NEXT_VERSION] * 4 + ["1", "/usr/lib/score/bin/scrun"], out

    # Purged: nothing of score stays.
    chroot.run("apt-get purge -y -q scored score-client pm-tools libpm0 && "
               "apt-get autoremove --purge -y -q")
    gone = chroot.run("for p in /etc/score /var/lib/scored /usr/sbin/scored /usr/lib/score "
                      "/usr/bin/scrun /etc/alternatives/scrun /usr/bin/scorectl "
                      "/usr/share/man/man1/scrun.1.gz; do [ -e $p ] || [ -L $p ] && echo $p; "
                      "done; update-alternatives --list scrun || true").stdout
    assert gone.strip() == "", gone
    left = [str(p.relative_to(chroot.files)) for p in chroot.files.rglob("*")
            if any(w in p.name for w in ("score", "libpm", "pminfo", "pmbench", "pmcheck"))]
    left = [p for p in left if not p.startswith(RECORDS)]
    assert not left, left
