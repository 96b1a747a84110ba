"""`make test`'s scheduling (tests/scheduling.py): its names still name tests, the Spark tests are
one unit, and units leave the queue longest first."""

from __future__ import annotations

from tests import scheduling
from tests.checkout import ROOT


def test_every_unit_the_scheduler_names_exists():
    for unit in (*scheduling.LONGEST, *scheduling.SPLIT):
        path, _, test = unit.partition("::")
        assert (ROOT / path).exists(), unit
        if test:
            assert f"def {test}(" in (ROOT / path).read_text(), unit


def test_spark_tests_are_one_unit_and_split_files_one_per_test():
    assert {scheduling.scope_of(n) for n in ("tests/pipeline/test_write.py::test_a",
                                             "tests/pipeline/test_streaming.py::test_b[1]")} == {"tests/pipeline"}
    chunks = ["tests/storage/test_power_loss.py::test_x[0]", "tests/storage/test_power_loss.py::test_x[1]"]
    assert [scheduling.scope_of(n) for n in chunks] == chunks
    assert scheduling.scope_of("tests/e2e/test_bad_input.py::test_y") == "tests/e2e/test_bad_input.py"


def test_the_queue_gives_the_longest_units_first_then_the_largest():
    queue = scheduling._LongestFirst()
    for scope, count in (("tests/a_test.py", 3), ("tests/storage/test_power_loss.py::t[2]", 1),
                         ("tests/b_test.py", 40), (scheduling.SPARK, 60), ("tests/ops/test_image.py", 4)):
        queue[scope] = dict.fromkeys(range(count), False)
    order = [queue.popitem(last=False)[0] for _ in range(len(queue))]
    assert order == [scheduling.SPARK, "tests/ops/test_image.py", "tests/storage/test_power_loss.py::t[2]",
                     "tests/b_test.py", "tests/a_test.py"]
