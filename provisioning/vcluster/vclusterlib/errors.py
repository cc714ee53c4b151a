"""The single error type of vcluster.

Every failure a user can cause or fix is raised as VclusterError with a message
that says what went wrong and, where possible, what to do about it.  The command
line prints it as `vcluster: error: ...` and exits with `status`.
"""


class VclusterError(Exception):
    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status
