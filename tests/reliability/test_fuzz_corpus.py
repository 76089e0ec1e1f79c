"""Regression run of the fuzzer's corpus: every committed input (seeds and what
``python -m bench.fuzz`` found that reached new code) goes through the frame decoder and the
header, body, record, batch, property and msgId parsers again. A parser may only return a
value or raise ProtocolError (``one_input`` swallows that one); anything else fails here."""

from __future__ import annotations

import pytest

from bench.fuzz import CORPUS, TARGETS, one_input, seeds


def test_corpus_holds_every_seed_and_reaches_every_target() -> None:
    names = {path.name for path in CORPUS.iterdir()}
    assert {f"seed-{name}" for name in seeds()} <= names
    reached = {path.read_bytes()[0] % len(TARGETS) for path in CORPUS.iterdir() if path.stat().st_size}
    assert reached == set(range(len(TARGETS)))


@pytest.mark.timeout(120)
def test_corpus_replays_without_a_crash() -> None:
    files = sorted(p for p in CORPUS.iterdir() if p.is_file())
    for path in files:
        try:
            one_input(path.read_bytes())
        except Exception as exc:  # pragma: no cover - the failure message names the input
            raise AssertionError(f"{path.name}: {type(exc).__name__}: {exc}") from exc
