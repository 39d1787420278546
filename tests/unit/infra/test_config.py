"""One TOML file, validated at start, with dotted overrides and errors that name the key."""

from pathlib import Path

import pytest

from infra.config import DEFAULT_CONFIG, ConfigError, RtrlConfig, apply_override, load_config

REPO = Path(__file__).parents[3]


# the defaults, the overlays and model profiles (infra/configs/), the cluster example (infra/deploy/): each loads on
# its own, so each meets the rules across sections too
CHECKED_IN = sorted(p for d in ("infra", "examples") for p in (REPO / d).rglob("*.toml"))


def test_the_checked_in_configs_are_found():
    names = {p.relative_to(REPO).as_posix() for p in CHECKED_IN}
    assert {"infra/rtrl.toml", "infra/configs/demo.toml", "infra/configs/profiles/mistral-7b.toml",
            "infra/deploy/production.example.toml"} <= names


@pytest.mark.parametrize("path", CHECKED_IN, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_checked_in_config_loads(path):
    assert isinstance(load_config(path), RtrlConfig)


def test_documented_default_file_matches_the_model_defaults():
    assert load_config(DEFAULT_CONFIG) == RtrlConfig()


def test_overrides_are_typed_like_toml_values():
    cfg = load_config(None, ["kafka.port=29092", "sdk.sampling.codebase_snapshot=0.25", "sdk.privacy_mode=true",
                             "state_dir=/tmp/x", "kafka.topic_partitions.trajectories=6"])
    assert cfg.kafka.port == 29092
    assert cfg.sdk.sampling == {"codebase_snapshot": 0.25}
    assert cfg.sdk.privacy_mode is True
    assert cfg.state_dir == "/tmp/x"
    assert cfg.kafka.partitions_for("trajectories") == 6 and cfg.kafka.partitions_for("dead-letter") == 3


@pytest.mark.parametrize("override, message", [
    ("kafka.port=70000", "kafka.port: Input should be less than or equal to 65535 (got 70000)"),
    ("kafka.prot=1", "kafka.prot: unknown key"),
    ("sdk.queue_full_policy=explode", "sdk.queue_full_policy: Input should be 'drop_newest', 'drop_oldest' or 'spool'"),
    ("sdk.sampling.trajectory=1.5", "sdk.sampling.trajectory: Input should be less than or equal to 1"),
    ("collector.port=http", "collector.port: Input should be a valid integer"),
])
def test_bad_value_error_names_the_key_and_why(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_override_without_equals_sign_is_rejected():
    with pytest.raises(ConfigError, match="must look like key.sub=value"):
        load_config(None, ["kafka.port"])


def test_override_into_a_value_is_rejected():
    with pytest.raises(ConfigError, match="'port' is a value, not a section"):
        apply_override({"kafka": {"port": 1}}, "kafka.port.x=1")


def test_missing_and_malformed_files_are_reported(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\nport = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_empty_paths_default_under_the_state_dir(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    assert cfg.path_or_default(cfg.archive.output_dir, "archive") == tmp_path / "archive"
    assert cfg.mlflow_tracking_uri() == f"sqlite:///{tmp_path}/mlflow.db"
