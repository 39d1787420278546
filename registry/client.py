"""Policy checkpoints in the MLflow model registry: register a Hugging Face folder as a model version, point
aliases at versions, resolve an alias to a local folder.

Every component meets the registry through this module: `rtrl bootstrap` and the trainer register versions,
serving resolves its arms' aliases (and polls them for hot swaps), promotion moves `champion`. A version's files
are the artifacts of one MLflow run (`checkpoint/`); `local_path` downloads them once into a cache folder named by
version, atomically, so concurrent readers never see a half-copied checkpoint. Every version carries the SHA-256
of its files but the descriptive metadata (tag `rtrl.content_sha256`): two versions with the same tag are the same
model, even in two registries (the gate's episode cache relies on it).

**Artifact root.** `artifact_root` is a storage location (`schemas.storage`): a local folder (the default,
`<state_dir>/mlflow-artifacts`) or an object-store URL `s3://bucket/prefix`. The experiment this module creates gets
`<root>/<experiment>` as its artifact location (`file:///...` for a folder, the `s3://` URL as is), so MLflow's own
S3 artifact repository (boto3) uploads and downloads a version's files: nothing goes through local disk but the
download cache. MLflow reads a custom S3 endpoint from `MLFLOW_S3_ENDPOINT_URL`; `use_s3_endpoint_from_aws_env`
sets it from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` (the variables `schemas.storage` reads), so one setting
points the data plane and MLflow at the same server. An experiment keeps the location it was created with:
changing `mlflow.artifact_root` later applies to a new tracking store (or experiment), not to existing versions.

**Organizations.** An org's specialized adapters (trainer/run.py with `org`) form a lineage of their own: the
registered model `<model>.org-<org>` (`org_model`, `Registry.for_org`), with its own versions and its own
`champion` alias (written `champion@<org>`). Its versions are LoRA adapters over a version of the shared model
(`lora_base`, with `lora_base_model` naming the shared model). Requests served by one carry the policy version label
`<version>@<org>` (`version_label`), so no org version is ever taken for a shared one.

**Retention.** `registry.retention` plans which versions keep their artifacts, `registry.retention_apply` deletes
the others' (the version, its tags and metrics stay): it tags a version `retention.deleting` before it deletes its
files and `retention.artifacts_deleted` once they are gone. `local_path` refuses such a version (`ArtifactsDeleted`),
and checks the tags again after a download, before the folder enters the cache: a download that raced with a
deletion never becomes a cached checkpoint. A version only a delta chain holds loses its float32 master alone
(`retention.master_deleting`, then `retention.master_deleted`): `served_path` still rebuilds it, `local_path` and
`master_path` refuse it, and so do promotion and rollback (`master_deleted`).

**Promotion lock.** `promotion_lock` is where `registry.promotion` serialises its compare-and-swap: None (the
caller's local lock file), a local path (an flock on it), or an object-store URL (a lease object there, which holds
across hosts). `from_config` takes `mlflow.promotion_lock`, else a lease under an object-store artifact root.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from schemas import storage

logger = logging.getLogger(__name__)

EXPERIMENT = "rtrl-checkpoints"
ARTIFACT_DIR = "checkpoint"
DIGEST_TAG = "rtrl.content_sha256"
LOCKS_DIR = "_rtrl-locks"   # under an object-store artifact root: the promotion lease (not an experiment's folder)
ORG_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ORG_MODEL = ".org-"
DELETING_TAG = "retention.deleting"            # set before retention deletes a version's artifacts (time, ISO)
DELETED_TAG = "retention.artifacts_deleted"    # set once they are deleted (time, ISO)
MASTER_DELETING_TAG = "retention.master_deleting"  # set before retention deletes only the float32 master (time, ISO)
MASTER_DELETED_TAG = "retention.master_deleted"    # set once it is deleted; the served weights stay (time, ISO)


def check_org(org: str) -> str:
    """An org id usable in a model name and a version label (letters, digits, '_', '.', '-'; at most 64)."""
    if not isinstance(org, str) or not ORG_ID.match(org):
        raise ValueError(f"org id {org!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or "
                         "digit")
    return org


def org_model(model: str, org: str) -> str:
    """The registered model of `org`'s specialized lineage."""
    return f"{model}{ORG_MODEL}{check_org(org)}"


def version_label(version: str, org: str | None = None) -> str:
    """What trajectories and reward rows record as `policy_version`: the shared model's version as is, an org
    model's as `<version>@<org>`."""
    return str(version) if org is None else f"{version}@{check_org(org)}"


def parse_label(label: str) -> tuple[str, str | None]:
    """(version, org or None) of a policy version label."""
    version, sep, org = str(label).partition("@")
    return (version, org) if sep else (version, None)


def use_s3_endpoint_from_aws_env(env=None) -> str | None:
    """Point MLflow's S3 artifact repository at the S3 server `schemas.storage` uses: set `MLFLOW_S3_ENDPOINT_URL`
    from `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` when those name one and it is not set already (an explicit
    value wins). Returns the endpoint MLflow will use (None: AWS's own). Child processes (the MLflow UI) inherit
    it."""
    env = os.environ if env is None else env
    if not env.get("MLFLOW_S3_ENDPOINT_URL"):
        endpoint = storage.S3Settings.from_env(env).endpoint_url
        if endpoint:
            env["MLFLOW_S3_ENDPOINT_URL"] = endpoint
    return env.get("MLFLOW_S3_ENDPOINT_URL") or None


def _is_remote_uri(uri: str) -> bool:
    return urlsplit(uri).scheme not in ("", "file")


def artifact_location(artifact_root, experiment: str) -> str:
    """The MLflow artifact location of `experiment` under `artifact_root`: a `file://` URI for a local folder, the
    object-store URL (`s3://bucket/prefix/<experiment>`) for a remote one."""
    loc = storage.join(artifact_root, experiment)
    return loc.absolute().as_uri() if isinstance(loc, Path) else loc


def is_server_uri(tracking_uri: str) -> bool:
    """Whether a tracking URI names an MLflow server (http, https), shared by hosts, rather than a local store.
    (`infra.stack.config.MlflowConfig.remote` answers the same for a configuration: config imports no registry.)"""
    return tracking_uri.split(":", 1)[0] in ("http", "https")


def is_database_url(loc) -> bool:
    """Whether a promotion lock names a Postgres database (an advisory lock there: registry.promotion)."""
    return isinstance(loc, str) and loc.split(":", 1)[0] in ("postgresql", "postgres")


def default_promotion_lock(artifact_root, model: str) -> str | None:
    """The lease object the promotion of `model` uses when nothing is configured: under an object-store artifact
    root (`<root>/_rtrl-locks/promotion-<model>.lease`), None for a local root (the flock of the caller)."""
    if not storage.is_remote(artifact_root):
        return None
    return storage.join(artifact_root, LOCKS_DIR, f"promotion-{model}.lease")


# Files that say how a checkpoint was made, not what it does (trainer/bootstrap write them: registering the same
# weights again, as every demo does with its cached v0, writes a new one); the digest leaves them out.
DESCRIPTIVE_FILES = frozenset({"rtrl_metadata.json"})


# The file that makes a folder a policy checkpoint: a full Hugging Face one, or a peft LoRA adapter over a full
# one, whose base version its rtrl_metadata.json and its `lora_base` tag name (trainer/adapters.py writes it,
# serving/lora.py serves it).
ADAPTER_CONFIG = "adapter_config.json"
LORA_BASE = "lora_base"
CHECKPOINT_MARKERS = ("config.json", ADAPTER_CONFIG)


def is_checkpoint(folder: str | Path) -> bool:
    return any((Path(folder) / name).is_file() for name in CHECKPOINT_MARKERS)


def is_adapter(folder: str | Path) -> bool:
    """Whether a policy folder is a peft LoRA adapter (else a full Hugging Face checkpoint)."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


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


class ArtifactsDeleted(LookupError):
    """Retention deleted the version's checkpoint files: it cannot be loaded (its tags and metrics remain)."""


def artifacts_deleted(tags: dict[str, str]) -> str | None:
    """When retention deleted (or began deleting) the artifacts of a version with these tags, else None."""
    return tags.get(DELETED_TAG) or tags.get(DELETING_TAG)


def master_deleted(tags: dict[str, str]) -> str | None:
    """When retention deleted (or began deleting) the float32 master of a version with these tags (all its
    artifacts, or the master alone), else None: such a version can be served through a delta chain, never
    promoted, rolled back to or trained from."""
    return artifacts_deleted(tags) or tags.get(MASTER_DELETED_TAG) or tags.get(MASTER_DELETING_TAG)


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
    def __init__(self, tracking_uri: str, artifact_root: Path | str | None, model: str, cache_dir: Path,
                 promotion_lock: Path | str | None = None, ship_policy=None):
        """`artifact_root` None: the tracking server's own artifact store (an MLflow server serving artifacts, whose
        experiments get `mlflow-artifacts:/` locations). `ship_policy` (registry.shipping.ShipPolicy): every
        checkpoint registered also ships its served weights; None: none does."""
        from mlflow.tracking import MlflowClient

        self.tracking_uri, self.model, self.ship_policy = tracking_uri, model, ship_policy
        self.org: str | None = None     # set on an org's view (`for_org`)
        self.artifact_root = None if artifact_root is None else storage.normalize(artifact_root)
        self.cache_dir = Path(cache_dir)
        self.promotion_lock = (None if promotion_lock is None else promotion_lock if is_database_url(promotion_lock)
                               else storage.normalize(promotion_lock))
        if self.artifact_root is not None and storage.is_remote(self.artifact_root):
            use_s3_endpoint_from_aws_env()
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    @classmethod
    def from_config(cls, cfg) -> "Registry":
        """From an `RtrlConfig` (tracking URI, artifact root, registered model name, cache under the state dir,
        promotion lock: `mlflow.promotion_lock`, else a lease under an object-store artifact root)."""
        server = cfg.mlflow.remote() and not cfg.mlflow.artifact_root    # the server's own (proxied) artifacts
        root = None if server else cfg.path_or_default(cfg.mlflow.artifact_root, "mlflow-artifacts")
        model = cfg.mlflow.registered_model
        pl = cfg.mlflow.promotion_lock
        lock = (pl if is_database_url(pl) else cfg.path_or_default(pl, "registry.promotion.lock") if pl
                else None if root is None else default_promotion_lock(root, model))
        return cls(cfg.mlflow_tracking_uri(), root, model, cfg.state_path / "checkpoints", promotion_lock=lock,
                   ship_policy=cfg.weights.policy(cfg.serving.dtype) if cfg.weights.ship else None)

    def for_org(self, org: str) -> "Registry":
        """The registry of `org`'s specialized lineage (`org_model`): the same store, client, cache and promotion
        lock, another registered model."""
        if ORG_MODEL in self.model:
            raise ValueError(f"{self.model} is already an org's model")
        other = copy.copy(self)
        other.model, other.org, other.shared_model = org_model(self.model, org), org, self.model
        return other

    def shared(self) -> "Registry":
        """The shared lineage's registry (this one unless it is an org's view)."""
        if self.org is None:
            return self
        other = copy.copy(self)
        other.model, other.org = self.shared_model, None
        return other

    def orgs(self) -> list[str]:
        """The orgs that have a specialized lineage in this store (registered models `<model>.org-*`)."""
        prefix = f"{self.model}{ORG_MODEL}"
        names = [m.name for m in self.client.search_registered_models(f"name LIKE '{prefix}%'")]
        return sorted(n[len(prefix):] for n in names if n.startswith(prefix))

    def experiment_id(self, name: str = EXPERIMENT) -> str:
        """The id of experiment `name`, created (artifacts under the artifact root) when missing."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if self.artifact_root is None:
                return exp.experiment_id
            if storage.is_remote(self.artifact_root) != _is_remote_uri(exp.artifact_location or ""):
                warnings.warn(f"experiment {name!r} keeps its artifacts at {exp.artifact_location}, not under the "
                              f"configured artifact root {self.artifact_root}: an experiment keeps the location it "
                              "was created with (use a fresh tracking store for the new root)", stacklevel=2)
            return exp.experiment_id
        if self.artifact_root is None:        # the server decides (mlflow-artifacts:/ when it serves artifacts)
            return self.client.create_experiment(name)
        storage.mkdirs(self.artifact_root)   # a local folder; nothing to create in an object store
        return self.client.create_experiment(name, artifact_location=artifact_location(self.artifact_root, name))

    def register(self, folder: str | Path, tags: dict[str, str] | None = None,
                 run_name: str = "checkpoint", log=print) -> str:
        """Log `folder` (an HF checkpoint or a LoRA adapter) as a run's artifacts and make it a new version, tagged
        with the folder's `content_digest`; returns the version. With a ship policy a checkpoint (not an adapter,
        shipped as it is) also ships its served weights (registry/shipping.py) before this returns."""
        from mlflow.exceptions import MlflowException

        folder = Path(folder)
        if not is_checkpoint(folder):
            raise ValueError(f"{folder} is not a Hugging Face checkpoint folder (no config.json) nor a LoRA adapter "
                             "(no adapter_config.json)")
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
        if self.ship_policy is not None and not is_adapter(folder):
            from registry.served import INDEX, SINGLE
            from registry.shipping import ship

            why = None if (folder / SINGLE).is_file() or (folder / INDEX).is_file() else "no safetensors weights"
            if why is None:
                try:
                    ship(self, str(mv.version), self.ship_policy, log=log, master=folder)
                except ValueError as e:       # weights that are not readable safetensors (registered as they are)
                    why = f"its weights cannot be read as safetensors ({e})"
            if why is not None:   # served from the checkpoint as it is
                log(f"[ship] version {mv.version}: {why} in {folder}; served from its checkpoint")
        return str(mv.version)

    def set_alias(self, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(self.model, alias, str(version))

    def delete_alias(self, alias: str) -> None:
        """Remove `alias`; nothing happens when it is not set."""
        if self.version_of(alias) is not None:
            self.client.delete_registered_model_alias(self.model, alias)

    def set_version_tags(self, version: str, tags: dict[str, object]) -> None:
        """Set (overwrite) tags on a version, e.g. the gate's decision or a promotion's audit trail (a label
        `<v>@<org>`: on the org lineage's version)."""
        reg, version, org = self._labelled(version)
        if org is not None:
            reg.set_version_tags(version, tags)
            return
        for key, value in tags.items():
            self.client.set_model_version_tag(self.model, str(version), key, str(value))

    def _labelled(self, label: str) -> tuple["Registry", str, str | None]:
        """(the registry that holds it, its plain version or alias, its org) for a label `<v>@<org>` or an alias
        `<alias>@<org>` on the shared registry; a plain one is this registry's own."""
        name, org = parse_label(label)
        if org is None or self.org is not None:
            return self, str(label), None
        return self.for_org(org), name, org

    def version_of(self, alias: str) -> str | None:
        """The version `alias` points to, or None when the alias (or the model) does not exist. On the shared
        registry `<alias>@<org>` is the org lineage's alias, answered as a label (`<version>@<org>`)."""
        from mlflow.exceptions import MlflowException

        reg, alias, org = self._labelled(alias)
        if org is not None:
            version = reg.version_of(alias)
            return None if version is None else version_label(version, org)

        try:
            return str(self.client.get_model_version_by_alias(self.model, alias).version)
        except MlflowException:
            return None

    def info(self, version: str) -> VersionInfo:
        reg, version, org = self._labelled(version)
        if org is not None:
            return reg.info(version)
        mv = self.client.get_model_version(self.model, str(version))
        return VersionInfo(str(mv.version), mv.run_id, dict(mv.tags or {}))

    def digest(self, version: str) -> str | None:
        return self.info(version).digest

    def local_path(self, version: str) -> Path:
        """The version's checkpoint folder on this machine (downloaded once into the cache). The cache is per
        registered model: version numbers of two models in one store are not the same checkpoints."""
        import mlflow.artifacts

        reg, version, org = self._labelled(version)
        if org is not None:          # an org version's label, on the shared registry
            return reg.local_path(version)
        dest = self.cache_dir / self.model / f"v{version}"
        if is_checkpoint(dest):
            return dest
        info = self._loadable(version)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=dest.parent))
        try:
            try:
                got = mlflow.artifacts.download_artifacts(run_id=info.run_id, artifact_path=ARTIFACT_DIR,
                                                          dst_path=str(tmp), tracking_uri=self.tracking_uri)
            except Exception:  # noqa: BLE001 -- re-raised, unless retention deleted the files (said instead)
                self._loadable(version)       # files gone because retention deleted them: say so
                raise
            self._loadable(version)           # a deletion that began during the download: the copy may be partial
            try:
                os.replace(got, dest)
            except OSError:
                if not is_checkpoint(dest):  # not a concurrent download that won the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def served_path(self, version: str) -> Path:
        """The folder serving and the gate load `version` from: its served weights (registry/shipping.py: rebuilt
        from its delta chain, every tensor verified) when it ships them, else its checkpoint (a version registered
        before shipping, or a LoRA adapter). A served copy that fails verification is logged and the float32
        master is loaded instead (the engine casts it to its dtype): unverified weights are never returned."""
        from registry.delta import DeltaMismatch
        from registry.shipping import KIND_TAG, served_folder

        reg, version, org = self._labelled(version)
        if org is not None:
            return reg.served_path(version)
        if KIND_TAG not in self._loadable(version, master=False).tags:
            return self.local_path(version)
        try:
            return served_folder(self, version)
        except DeltaMismatch as e:
            logger.error("version %s of model %s: its served weights failed verification (%s); loading its float32 "
                         "master instead", version, self.model, e)
            return self.master_path(version)

    def newest_version(self) -> str | None:
        """The version registered last in this model (None when it has none): what serving prefetches."""
        try:
            page = self.client.search_model_versions(f"name = '{self.model}'", max_results=1,
                                                     order_by=["version_number DESC"])
        except Exception:  # noqa: BLE001 -- no registered model yet, or a registry hiccup: nothing to prefetch
            return None
        return str(page[0].version) if page else None

    def master_path(self, version: str) -> Path:
        """The version's checkpoint folder (its float32 master), its content digest checked against the one
        registered with it (DeltaMismatch if it differs): what serving falls back to when a served copy fails."""
        from registry.delta import DeltaMismatch

        folder = self.local_path(version)
        expected = self.digest(version)
        if expected is not None and content_digest(folder) != expected:
            raise DeltaMismatch(f"version {version} of model {self.model}: its checkpoint in {folder} does not match "
                                "the digest registered with it")
        return folder

    def _loadable(self, version: str, master: bool = True) -> VersionInfo:
        """The version's info; ArtifactsDeleted when retention deleted (or is deleting) its files, or, for its
        master (`master`, its `checkpoint/` artifacts), when it deleted the master alone."""
        info = self.info(version)
        if (when := artifacts_deleted(info.tags)) is not None:
            raise ArtifactsDeleted(f"version {version} of model {self.model!r} cannot be loaded: retention deleted its "
                                   f"checkpoint files at {when} (no alias, rollback chain, stage or cycle in flight "
                                   "held it); its tags, metrics and gate reports remain in MLflow")
        if master and (when := master_deleted(info.tags)) is not None:
            raise ArtifactsDeleted(f"version {version} of model {self.model!r} has no float32 master: retention "
                                   f"deleted it at {when} (only the delta chain of a later version held it, which "
                                   "needs its served weights alone); it can be served, not trained from or promoted")
        return info

    def resolve(self, alias: str) -> tuple[str, Path]:
        """(version, local folder) of `alias`; a clear error when the alias is not set."""
        version = self.version_of(alias)
        if version is None:
            raise LookupError(f"registry alias {alias!r} of model {self.model!r} is not set "
                              "(run `rtrl bootstrap` to make and register v0)")
        return version, self.local_path(version)
