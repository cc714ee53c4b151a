"""Tests of the virtual cluster (provisioning/vcluster).

A package, so that its module names (vcluster.test_errors, vcluster.checks)
never collide with test modules of the same name elsewhere under tests/."""
