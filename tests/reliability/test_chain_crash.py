"""Crash anywhere in a chained batch: a query with three stateful operators, SIGKILLed at each
point of a batch (each operator's stage done, before and after the commit entry, in a task),
runs again to the same rows in the same batches as a run never killed, and its checkpoint
verifies clean (tests/reliability/chain_round.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.chain_round import CHAIN_KILLS, ChainRounds

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(3600)]


def test_a_kill_at_every_point_of_a_chained_batch_restores_exactly(tmp_path: Path) -> None:
    rounds = ChainRounds(tmp_path, random.Random(33))
    assert len(rounds.reference()) >= len({"batch-0", "batch-5"}), "the job ran few batches"
    for point, count in CHAIN_KILLS:
        rounds.round(point, count)
    assert rounds.rounds == len(CHAIN_KILLS)
