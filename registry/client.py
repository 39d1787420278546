"""Policy checkpoints in the MLflow model registry: register a Hugging Face folder as a model version, point
aliases at versions, resolve an alias to a local folder.

Every component meets the registry through this module: `rtrl bootstrap` and the trainer register versions,
serving resolves its arms' aliases (and polls them for hot swaps), promotion moves `champion`. A version's files
are the artifacts of one MLflow run (`checkpoint/`); `local_path` downloads them once into a cache folder named by
version, atomically, so concurrent readers never see a half-copied checkpoint. Every version carries the SHA-256
of its files but the descriptive metadata (tag `rtrl.content_sha256`): two versions with the same tag are the same
model, even in two registries (the gate's episode cache relies on it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

EXPERIMENT = "rtrl-checkpoints"
ARTIFACT_DIR = "checkpoint"
DIGEST_TAG = "rtrl.content_sha256"


# Files that say how a checkpoint was made, not what it does (trainer/bootstrap write them: registering the same
# weights again, as every demo does with its cached v0, writes a new one); the digest leaves them out.
DESCRIPTIVE_FILES = frozenset({"rtrl_metadata.json"})


def content_digest(folder: str | Path) -> str:
    """SHA-256 over what decides a checkpoint's behaviour: every file's path (relative, sorted) and bytes, except
    DESCRIPTIVE_FILES (symlinks are followed)."""
    folder = Path(folder)
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in DESCRIPTIVE_FILES):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class VersionInfo:
    version: str
    run_id: str
    tags: dict[str, str]

    @property
    def digest(self) -> str | None:
        """The version's `content_digest` (None for a version registered before versions carried it)."""
        return self.tags.get(DIGEST_TAG)


class Registry:
    def __init__(self, tracking_uri: str, artifact_root: Path, model: str, cache_dir: Path):
        from mlflow.tracking import MlflowClient

        self.tracking_uri, self.model = tracking_uri, model
        self.artifact_root, self.cache_dir = Path(artifact_root), Path(cache_dir)
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    @classmethod
    def from_config(cls, cfg) -> "Registry":
        """From an `RtrlConfig` (tracking URI, artifact root, registered model name, cache under the state dir)."""
        return cls(cfg.mlflow_tracking_uri(), cfg.path_or_default(cfg.mlflow.artifact_root, "mlflow-artifacts"),
                   cfg.mlflow.registered_model, cfg.state_path / "checkpoints")

    def experiment_id(self, name: str = EXPERIMENT) -> str:
        """The id of experiment `name`, created (artifacts under the artifact root) when missing."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        self.artifact_root.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=(self.artifact_root / name).as_uri())

    def register(self, folder: str | Path, tags: dict[str, str] | None = None,
                 run_name: str = "checkpoint") -> str:
        """Log `folder` (an HF checkpoint) as a run's artifacts and make it a new version, tagged with the folder's
        `content_digest`; returns the version."""
        from mlflow.exceptions import MlflowException

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise ValueError(f"{folder} is not a Hugging Face checkpoint folder (no config.json)")
        tags = {k: str(v) for k, v in (tags or {}).items()} | {DIGEST_TAG: content_digest(folder)}
        run = self.client.create_run(self.experiment_id(), run_name=run_name, tags=tags)
        try:
            self.client.log_artifacts(run.info.run_id, str(folder), ARTIFACT_DIR)
        except BaseException:
            self.client.set_terminated(run.info.run_id, "FAILED")
            raise
        self.client.set_terminated(run.info.run_id, "FINISHED")
        try:
            self.client.create_registered_model(self.model)
        except MlflowException as e:
            if "already exists" not in str(e).lower() and "RESOURCE_ALREADY_EXISTS" not in str(e):
                raise
        mv = self.client.create_model_version(self.model, f"{run.info.artifact_uri}/{ARTIFACT_DIR}",
                                              run_id=run.info.run_id, tags=tags)
        return str(mv.version)

    def set_alias(self, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(self.model, alias, str(version))

    def delete_alias(self, alias: str) -> None:
        """Remove `alias`; nothing happens when it is not set."""
        if self.version_of(alias) is not None:
            self.client.delete_registered_model_alias(self.model, alias)

    def set_version_tags(self, version: str, tags: dict[str, object]) -> None:
        """Set (overwrite) tags on a version, e.g. the gate's decision or a promotion's audit trail."""
        for key, value in tags.items():
            self.client.set_model_version_tag(self.model, str(version), key, str(value))

    def version_of(self, alias: str) -> str | None:
        """The version `alias` points to, or None when the alias (or the model) does not exist."""
        from mlflow.exceptions import MlflowException

        try:
            return str(self.client.get_model_version_by_alias(self.model, alias).version)
        except MlflowException:
            return None

    def info(self, version: str) -> VersionInfo:
        mv = self.client.get_model_version(self.model, str(version))
        return VersionInfo(str(mv.version), mv.run_id, dict(mv.tags or {}))

    def digest(self, version: str) -> str | None:
        return self.info(version).digest

    def local_path(self, version: str) -> Path:
        """The version's checkpoint folder on this machine (downloaded once into the cache). The cache is per
        registered model: version numbers of two models in one store are not the same checkpoints."""
        import mlflow.artifacts

        dest = self.cache_dir / self.model / f"v{version}"
        if (dest / "config.json").is_file():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=dest.parent))
        try:
            got = mlflow.artifacts.download_artifacts(run_id=self.info(version).run_id, artifact_path=ARTIFACT_DIR,
                                                      dst_path=str(tmp), tracking_uri=self.tracking_uri)
            try:
                os.replace(got, dest)
            except OSError:
                if not (dest / "config.json").is_file():  # not a concurrent download that won the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def resolve(self, alias: str) -> tuple[str, Path]:
        """(version, local folder) of `alias`; a clear error when the alias is not set."""
        version = self.version_of(alias)
        if version is None:
            raise LookupError(f"registry alias {alias!r} of model {self.model!r} is not set "
                              "(run `rtrl bootstrap` to make and register v0)")
        return version, self.local_path(version)
