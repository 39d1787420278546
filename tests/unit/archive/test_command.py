"""`rtrl archive`: configuration and the detached child's command line."""

from __future__ import annotations

import sys

import pytest

from infra.cli import _parser
from infra.commands.archive import _child_argv
from infra.config import ConfigError, load_config
from pipelines.archive.layout import archive_root


def test_detached_archiver_runs_the_same_config_and_overrides():
    args = _parser().parse_args(["--config", "my.toml", "--set", "kafka.port=1234", "--set", "state_dir=/x",
                                 "archive", "--detach", "--until-idle", "5"])
    assert _child_argv(args) == [sys.executable, "-m", "infra.cli", "--config", "my.toml", "--set", "kafka.port=1234",
                                 "--set", "state_dir=/x", "archive", "--until-idle", "5.0"]


def test_archive_root_defaults_under_the_state_dir(tmp_path):
    assert archive_root(load_config(None, [f"state_dir={tmp_path}"])) == tmp_path / "archive"
    assert archive_root(load_config(None, [f"archive.output_dir={tmp_path}/log"])) == tmp_path / "log"


@pytest.mark.parametrize("override, message", [
    ("archive.batch_max_events=0", "archive.batch_max_events: Input should be greater than or equal to 1"),
    ("archive.dedupe_window=-1", "archive.dedupe_window: Input should be greater than or equal to 0"),
    ("archive.compression=lz5", "archive.compression: Input should be"),
])
def test_bad_archive_settings_are_rejected_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_rtrl_archive_compact_maintains_the_root_once_and_refuses_beside_an_archiver(tmp_path, capsys):
    import json

    from infra.cli import main
    from pipelines.archive.lock import RootLock
    from pipelines.archive.reader import read_events
    from pipelines.archive.records import list_manifests
    from tests.unit.archive.helpers import FakeLog, all_types, archive_all

    root = tmp_path / "archive"
    log = FakeLog(partitions=2)
    events = all_types(40)
    log.produce(events)
    archive_all(root, log, batch_max_events=3)
    argv = ["--set", f"state_dir={tmp_path}", "--set", "archive.retention_s=0", "--set", "archive.compact_min_files=2",
            "archive", "compact"]
    held = RootLock(root)
    held.acquire()                                   # an archiver running on the root
    assert main(argv) == 1 and "a running archiver maintains its root itself" in capsys.readouterr().err
    held.release()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)["archive_compact"]
    assert out["checkpoint"] == 1 and out["manifests_folded"] > 10 and out["files_compacted"] > 10
    assert list_manifests(root) == [] and read_events(root, dedupe=False).height == len(events)
