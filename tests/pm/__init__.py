"""Integration tests of PM on the virtual cluster (pmcheck under mpirun).

A package, so that its module names (pm.pmjob, pm.test_udp) never collide
with test modules of the same name elsewhere under tests/."""
