"""How `make test` hands the suite to its xdist workers: ``--dist loadfile`` (a test file's tests
share its module's broker, so a file is one unit), refined in two ways that shorten the run:

- **tests/pipeline is one unit.** Its tests share one Spark session per worker process, and a
  local Spark takes tens of seconds of a loaded machine to start: spread over three workers it
  started three JVMs.
- **The longest units go first,** so that no long file starts last and runs alone at the end
  while the other workers idle. xdist's own order is by test count, which puts the hypothesis
  files (hundreds of short parametrized tests) first and a five-test file that runs for minutes
  last. ``LONGEST`` names the long units, longest first (measured with ``--durations=0``); the
  rest follow by test count, as xdist orders them. Files whose tests share nothing (the
  power-loss chunks, the crash loops, the atheris targets) are split into one unit per test.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadScopeScheduling

SPARK = "tests/pipeline"

#: Units that run for half a minute or more on two cores, longest first (a split file's entry
#: ranks each of its tests).
LONGEST = (
    SPARK,
    "tests/ops/test_image.py",
    "tests/test_install.py",
    "tests/e2e/test_crash_loop.py::test_kill_9_loop_loses_duplicates_and_corrupts_nothing",
    "tests/storage/test_power_loss.py",
    "tests/protocol/test_codec_core.py",
    "tests/protocol/test_messages.py",
    "tests/docs/test_readme.py",
    "tests/e2e/test_consumer_groups.py",
    "tests/storage/cleaner/test_crash_recovery.py",
    "tests/protocol/test_core.py",
    "tests/security/test_reauthentication.py",
    "tests/storage/cleaner/test_cleaner_threads.py",
)

#: Files whose tests share no module fixture: each test is a unit of its own.
SPLIT = ("tests/storage/test_power_loss.py", "tests/e2e/test_crash_loop.py", "tests/fuzz/test_fuzz.py")


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path.startswith(SPARK + "/"):
        return SPARK
    if path in SPLIT:
        return nodeid
    return path


def rank(scope: str) -> int:
    for i, unit in enumerate(LONGEST):
        if scope == unit or scope.startswith(unit + "::"):
            return i
    return len(LONGEST)


class _LongestFirst(OrderedDict):
    """The work queue: LoadScopeScheduling takes its next unit with ``popitem(last=False)``."""

    def popitem(self, last: bool = True):
        if last:
            return super().popitem(last=True)
        scope = min(self, key=lambda s: (rank(s), -len(self[s])))
        return scope, self.pop(scope)


class LongestFirstFileScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.workqueue = _LongestFirst()

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
