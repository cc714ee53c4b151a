"""provisioning/site.yml and the roles of roles/ pass ansible-lint's
production profile and ansible-playbook's syntax check (the roles run on
real nodes in tests/packaging/test_cluster.py)."""

import subprocess

from conftest import REPO_ROOT

SITE = REPO_ROOT / "provisioning" / "site.yml"


def test_site_and_roles_pass_ansible_lint_production_profile():
    proc = subprocess.run(["ansible-lint", "--nocolor", "--profile", "production", str(SITE),
                           str(REPO_ROOT / "roles")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_site_passes_the_syntax_check():
    proc = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "localhost,", str(SITE)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_role_has_the_layout_and_documents_every_variable():
    for role in sorted(p for p in (REPO_ROOT / "roles").iterdir() if p.is_dir()):
        for part in ("defaults/main.yml", "tasks/main.yml", "handlers/main.yml", "meta/main.yml",
                     "meta/argument_specs.yml", "README.md"):
            assert (role / part).is_file(), f"{role.name}: no {part}"
        readme = (role / "README.md").read_text()
        specs = (role / "meta" / "argument_specs.yml").read_text()
        for line in (role / "defaults" / "main.yml").read_text().splitlines():
            if line and not line.startswith(("#", "-", " ")) and ":" in line:
                var = line.split(":", 1)[0]
                assert f"`{var}`" in readme, f"{role.name}: {var} is not in its README"
                assert f"{var}:" in specs, f"{role.name}: {var} has no argument spec"
