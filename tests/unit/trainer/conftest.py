"""Fixtures of the trainer tests."""

import pytest

from tests.unit.trainer.tiny import sampled_rows, tiny_checkpoint


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A tiny random checkpoint and 48 reward rows sampled from it."""
    folder = tiny_checkpoint(tmp_path_factory.mktemp("parent"))
    return folder, sampled_rows(folder, 48)
