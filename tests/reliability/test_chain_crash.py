"""Crash anywhere in a chained batch: a query with three stateful operators, SIGKILLed at each
point of a batch in turn (each operator's stage done, before and after the commit entry, in a
task), each run restarting from the kill before it, runs to the end with the same rows in the
same batches as a run never killed, and its checkpoint verifies clean
(tests/reliability/chain_round.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.chain_round import CHAIN_KILL_SEQUENCE, CHAIN_KILLS, ChainRounds

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(3600)]


def test_a_kill_at_every_point_of_a_chained_batch_restores_exactly(tmp_path: Path) -> None:
    rounds = ChainRounds(tmp_path, random.Random(33))
    assert len(rounds.reference()) >= len({"batch-0", "batch-5"}), "the job ran few batches"
    assert {point for point, _ in CHAIN_KILL_SEQUENCE} == {point for point, _ in CHAIN_KILLS}
    rounds.in_sequence(CHAIN_KILL_SEQUENCE)
    assert sum(rounds.kills.values()) == len(CHAIN_KILL_SEQUENCE)
