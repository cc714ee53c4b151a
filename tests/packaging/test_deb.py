"""The Debian packages (docs/admin/packages.md): `scripts/make-deb.sh` builds
them lintian-clean into a directory of the test's own, with a local apt
repository; each package holds what it must and nothing of the build tree;
the man pages come from the programs' own --help; the units verify."""

import re
import subprocess

from .conftest import PACKAGES, VERSION


def contents(deb):
    """The paths a .deb installs, as '/usr/bin/x' (directories end in '/')."""
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split(None, 5)[5].split(" -> ")[0].lstrip(".") for line in out.splitlines()}


def field(deb, name):
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def control_file(deb, name):
    proc = subprocess.run(["dpkg-deb", "-I", str(deb), name], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def test_every_package_is_built_at_the_changelogs_version(debs):
    _, found = debs.result()
    assert sorted(found) == sorted(PACKAGES)
    for name, deb in found.items():
        assert field(deb, "Version") == VERSION, name
        assert field(deb, "Architecture") == "amd64", name


def test_lintian_is_clean(debs):
    out, _ = debs.result()
    report = (out / "lintian.txt").read_text()
    bad = [line for line in report.splitlines() if re.match(r"[EW]: ", line)]
    assert not bad, report


def test_each_package_holds_its_files(debs):
    _, found = debs.result()
    want = {
        "libpm0": ["/usr/lib/x86_64-linux-gnu/libpm.so.0"],
        "libpm-dev": ["/usr/include/pm.h", "/usr/lib/x86_64-linux-gnu/libpm.so",
                      "/usr/lib/x86_64-linux-gnu/pkgconfig/pm.pc"],
        "pm-tools": ["/usr/bin/pminfo", "/usr/bin/pmbench", "/usr/bin/pmcheck",
                     "/usr/bin/pmdsm-check", "/usr/bin/pmdsm-bench",
                     "/usr/share/man/man1/pminfo.1.gz", "/usr/share/man/man1/pmbench.1.gz",
                     "/usr/share/man/man1/pmcheck.1.gz", "/usr/share/man/man1/pmdsm-check.1.gz",
                     "/usr/share/man/man1/pmdsm-bench.1.gz"],
        "libpmdsm0": ["/usr/lib/x86_64-linux-gnu/libpmdsm.so.0"],
        "libpmdsm-dev": ["/usr/include/pmdsm.h", "/usr/lib/x86_64-linux-gnu/libpmdsm.so",
                         "/usr/lib/x86_64-linux-gnu/pkgconfig/pmdsm.pc"],
        "scored": ["/usr/sbin/scored", "/etc/score/scored.toml",
                   "/lib/systemd/system/scored-master.service",
                   "/lib/systemd/system/scored-agent.service",
                   "/usr/share/man/man8/scored.8.gz"],
        "score-client": ["/usr/lib/score/bin/scrun", "/usr/bin/scorectl",
                         "/usr/share/man/man1/score-scrun.1.gz",
                         "/usr/share/man/man1/scorectl.1.gz"],
        "libfabric-pm": ["/usr/lib/x86_64-linux-gnu/libfabric/libpm-fi.so"],
        "slurm-spank-score": ["/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_score.so",
                              "/etc/slurm/plugstack.conf.d/score.conf"],
    }
    for name, paths in want.items():
        have = contents(found[name])
        missing = [p for p in paths if p not in have]
        assert not missing, (name, missing, sorted(have))
        # Nothing of the build tree, the test programs or the examples.
        assert not [p for p in have if "pm-ring-pass" in p or "/build/" in p
                    or p.endswith(("_seq", "_dsm", "_mpi"))], (name, have)
    # score-client never ships /usr/bin/scrun itself (Slurm >= 23.02 has one).
    assert "/usr/bin/scrun" not in contents(found["score-client"])
    assert "update-alternatives --install /usr/bin/scrun scrun /usr/lib/score/bin/scrun" in \
        control_file(found["score-client"], "postinst")


def test_the_configuration_is_a_conffile_and_the_units_are_not_enabled(debs):
    _, found = debs.result()
    assert control_file(found["scored"], "conffiles").split() == ["/etc/score/scored.toml"]
    postinst = control_file(found["scored"], "postinst")
    # Not enabled on install (only re-enabled if the administrator had them
    # enabled); started or restarted by deb-systemd-invoke, which starts no
    # disabled unit; stopped on removal.
    for unit in ("scored-master.service", "scored-agent.service"):
        assert f"deb-systemd-helper debian-installed '{unit}'" in postinst, postinst
        assert "deb-systemd-helper --quiet was-enabled" in postinst, postinst
    assert "_dh_action=restart" in postinst and "deb-systemd-invoke $_dh_action" in postinst, \
        postinst
    prerm = control_file(found["scored"], "prerm")
    for unit in ("scored-master.service", "scored-agent.service"):
        assert f"deb-systemd-invoke stop '{unit}'" in prerm, prerm
    assert "rm -rf /var/lib/scored" in control_file(found["scored"], "postrm")


def test_library_dependencies_come_from_the_programs(debs):
    _, found = debs.result()
    deps = {name: field(deb, "Depends") for name, deb in found.items()}
    assert "libmunge2" in deps["scored"] and "libpmix2" in deps["scored"], deps["scored"]
    assert "libpm0 (" in deps["pm-tools"] and "libpmdsm0 (" in deps["pm-tools"], deps["pm-tools"]
    assert "libpm0 (" in deps["libpmdsm0"], deps["libpmdsm0"]
    assert "libfabric1" in deps["libfabric-pm"] and "libpm0" in deps["libfabric-pm"], deps
    assert "libmunge2" in deps["score-client"], deps["score-client"]


def test_installed_binaries_carry_no_search_path(debs, tmp_path):
    _, found = debs.result()
    for name in ("pm-tools", "libfabric-pm", "scored", "libpmdsm0"):
        root = tmp_path / name
        subprocess.run(["dpkg-deb", "-x", str(found[name]), str(root)], check=True)
        for f in root.rglob("*"):
            if f.is_file() and not f.is_symlink() and f.read_bytes()[:4] == b"\x7fELF":
                dyn = subprocess.run(["readelf", "-d", str(f)], capture_output=True,
                                     text=True, check=True).stdout
                assert "RPATH" not in dyn and "RUNPATH" not in dyn, (f, dyn)


def test_man_pages_are_the_programs_help(debs, tmp_path):
    _, found = debs.result()
    root = tmp_path / "client"
    subprocess.run(["dpkg-deb", "-x", str(found["score-client"]), str(root)], check=True)
    page = subprocess.run(["zcat", str(root / "usr/share/man/man1/scorectl.1.gz")],
                          capture_output=True, text=True, check=True).stdout
    helptext = subprocess.run([str(root / "usr/bin/scorectl"), "--help"], capture_output=True,
                              text=True, check=True).stdout
    # Every subcommand scorectl --help lists is in its man page.
    commands = re.findall(r"^  ([a-z][a-z-]+)\s{2,}", helptext, re.M)
    assert commands, helptext
    for c in commands:
        assert c in page, (c, page[:2000])


def test_the_local_repository_lists_every_package(debs):
    out, _ = debs.result()
    packages = (out / "repo" / "Packages").read_text()
    listed = re.findall(r"^Package: (\S+)", packages, re.M)
    assert sorted(p for p in listed if not p.endswith("-dbgsym")) == sorted(PACKAGES)
    assert (out / "repo" / "Packages.gz").is_file()
