"""``tfmcheck.feedback`` as the graded kernel sees it (the sandbox binds this folder in its place).

The named mistakes are found by the grader, outside the kernel, when it replays the test cells on the recorded
results (``tfmgrader.verify``); the catalogue's builders, which compute correct answers, never enter the kernel.
Here ``For(...)`` and all it offers are inert (``tfmcheck.withheld``).
"""
from tfmcheck.withheld import WITHHELD


def For(*args, **kwargs):
    """The inert stand-in for ``tfmcheck.feedback.For``: its checks accept everything; the grader decides."""
    return WITHHELD
