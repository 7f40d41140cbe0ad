"""Every corrupt checkpoint file is noticed and named, by `verify` and by a load.

The short form of `python -m tests.reliability.corruption`; figures in docs/reliability.md.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.corruption import (
    DAMAGES,
    FILE_KINDS,
    Root,
    Targets,
    applicable,
    build_checkpoint,
    run_case,
)
from tests.support import S3Env

CASES = [pytest.param(kind, damage, id=f"{kind}-{damage}")
         for kind in FILE_KINDS for damage in DAMAGES if applicable(kind, damage)]
RANDOM_DAMAGES = ("bit_flip", "truncate")
RANDOM_REPEATS = 3


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Root, Targets, Path]:
    workdir = tmp_path_factory.mktemp("corruption")
    root = Root.on_files(workdir / "ckpt")
    return root, build_checkpoint(root, workdir / "writer"), workdir


@pytest.mark.parametrize(("kind", "damage"), CASES)
def test_a_damaged_file_is_named_by_verify_and_never_loads_as_other_state(
        built: tuple[Root, Targets, Path], kind: str, damage: str) -> None:
    root, targets, workdir = built
    rng = random.Random(f"{kind}/{damage}")
    repeats = RANDOM_REPEATS if damage in RANDOM_DAMAGES else 1
    for _ in range(repeats):
        result = run_case(root, workdir / "reader", targets, kind, damage, rng)
        assert result.verify_named_it, result
        if damage in RANDOM_DAMAGES:
            # a flip in bytes this load never reads (another log's frame, the footer) may
            # leave it exactly right; any other state is never allowed
            assert result.load in ("detected", "unaffected"), result
        else:
            assert result.load == "detected", result


def test_the_sound_checkpoint_verifies_and_loads(built: tuple[Root, Targets, Path]) -> None:
    root, _, workdir = built
    assert root.verify() == []
    workload = root.workload(workdir / "sound-reader", rng=random.Random(2))
    try:
        assert workload.recover() >= 0
    finally:
        workload.close()


def test_damaged_files_on_the_s3_api_are_named_too(s3: S3Env, tmp_path: Path) -> None:
    root = Root.on_s3(s3)
    targets = build_checkpoint(root, tmp_path / "writer")
    rng = random.Random(3)
    for kind in FILE_KINDS:
        for damage in ("bit_flip", "truncate", "empty"):
            result = run_case(root, tmp_path / "reader", targets, kind, damage, rng)
            assert result.verify_named_it, result
            assert result.load in (("detected", "unaffected") if damage != "empty"
                                   else ("detected",)), result
    assert root.verify() == []
