"""Integration tests of libpmdsm (the DSM) on the virtual cluster.

A package, so that its module names never collide with test modules of the
same name elsewhere under tests/."""
