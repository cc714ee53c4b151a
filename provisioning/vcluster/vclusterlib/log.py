"""Progress messages.

Progress goes to stderr so that stdout stays clean for machine-readable output
(`--json`) and for the output of commands run inside nodes.
"""

import sys

_quiet = False


def set_quiet(quiet):
    global _quiet
    _quiet = quiet


def step(message):
    """Report one step of a long operation (suppressed by --quiet)."""
    if not _quiet:
        print(f"vcluster: {message}", file=sys.stderr, flush=True)


def warn(message):
    """Report something the user should know about even with --quiet."""
    print(f"vcluster: warning: {message}", file=sys.stderr, flush=True)
