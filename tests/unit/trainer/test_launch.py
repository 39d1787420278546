"""Starting `rtrl train` on several ranks, without starting anything: when it launches, torchrun's command line,
the ranks' environment and arguments (their own `trainer.ranks`, so no rank launches again), and the options of
`rtrl bench ranks`."""

import sys

import pytest

from infra.cli import build_parser
from infra.commands.train import _launch_args
from trainer.launch import launch_argv, launch_env, needs_launch


def test_launches_only_for_several_ranks_and_never_from_inside_a_launched_world(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert needs_launch(2) and not needs_launch(1)
    monkeypatch.setenv("WORLD_SIZE", "1")           # what a single process's engine sets
    assert needs_launch(2)
    monkeypatch.setenv("WORLD_SIZE", "2")           # a rank of torchrun or the deepspeed launcher
    assert not needs_launch(2) and not needs_launch(4)


def test_each_rank_runs_the_same_command_with_its_config_and_the_rank_count_set():
    args = build_parser().parse_args(["--config", "c.toml", "--set", "trainer.zero_stage=3", "train", "--cycle", "c7",
                                      "--window", "c7", "--as-of", "2026-11-01T00:00:00Z", "--ranks", "4"])
    assert args.ranks == 4
    rank_args = _launch_args(args, 4)
    assert rank_args == ["--config", "c.toml", "--set", "trainer.zero_stage=3", "--set", "trainer.ranks=4", "train",
                         "--cycle", "c7", "--as-of", "2026-11-01T00:00:00Z", "--window", "c7"]
    argv = launch_argv(4, rank_args)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[argv.index("--nproc-per-node") + 1] == "4" and "--standalone" in argv
    module = argv.index("-m", 3)
    assert argv[module:module + 2] == ["-m", "infra.cli"] and argv[module + 2:] == rank_args


def test_the_ranks_environment_drops_a_single_process_world_and_shares_the_cores_on_cpu():
    import torch

    env = launch_env(2, {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "1234", "PYTHONPATH": "/x"})
    assert "RANK" not in env and "WORLD_SIZE" not in env and "MASTER_PORT" not in env and env["PYTHONPATH"] == "/x"
    if not torch.cuda.is_available():
        assert env["DS_ACCELERATOR"] == "cpu" and int(env["OMP_NUM_THREADS"]) >= 1
    assert launch_env(2, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"


def test_a_launchers_rank_variables_are_kept_by_the_engines_single_process_defaults(monkeypatch):
    from trainer.engine import _single_process_env

    launched = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29511"}
    for k, v in launched.items():
        monkeypatch.setenv(k, v)
    _single_process_env()
    import os

    assert {k: os.environ[k] for k in launched} == launched


def test_bench_ranks_options_and_their_defaults():
    args = build_parser().parse_args(["bench", "ranks", "--json"])
    assert (args.ranks, args.zero_stage) == (2, [3])
    args = build_parser().parse_args(["bench", "ranks", "--ranks", "3", "--zero-stage", "2"])
    assert (args.ranks, args.zero_stage) == (3, [2])
    assert build_parser().parse_args(["bench", "ranks", "--zero-stage", "1", "2", "3"]).zero_stage == [1, 2, 3]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "ranks", "--zero-stage", "4"])
