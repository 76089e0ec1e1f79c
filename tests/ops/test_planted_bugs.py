"""``make planted-bugs`` (tests/planted_bugs.py) plants each bug as a textual edit of the source:
a refactoring that changes that text would leave the bug unplanted and its run meaningless.
This keeps every bug's text present, once, and each of its tests named where it lives."""

from __future__ import annotations

import pytest

from tests.planted_bugs import BUGS, ROOT


@pytest.mark.parametrize("bug", BUGS, ids=[bug.name for bug in BUGS])
def test_every_planted_bug_still_finds_its_source_and_its_tests(bug: object) -> None:
    name, path, correct, planted, tests = bug  # type: ignore[misc]
    source = (ROOT / path).read_text()
    assert source.count(correct) == 1, (
        f"{name}: the text to replace occurs {source.count(correct)} times in {path}"
    )
    assert planted != correct
    for test in tests:
        file, _, function = test.partition("::")
        assert (ROOT / file).is_file(), f"{name}: {file} is gone"
        if function:
            assert f"def {function}(" in (ROOT / file).read_text(), f"{name}: {test} is gone"
