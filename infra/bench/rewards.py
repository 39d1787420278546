"""`rtrl bench rewards`: the reward job's throughput on a synthetic event log, against a polars reference.

  reference_polars_events_per_s  the same job in one process without Beam: read the archive's files, compute the
                                 spec with one polars pass (`assemble_rewards` once), write the same partitioned
                                 table -- the speed limit the Beam job is compared with (`replay_vs_reference`);
  reference_compute_only_events_per_s  that pass alone over frames already in memory (no I/O), for scale;
  replay_events_per_s            `rtrl replay`'s job (Beam DirectRunner) over the same archive;
  offset_range_events_per_s      a cycle run (`rtrl rewards`) over the same events produced to a private broker,
                                 fixing the range and reading it back through Beam;
  dask_events_per_s              the replay job unchanged on Beam's DaskRunner over a `dask.distributed`
                                 LocalCluster of `dask_workers` processes (no shared memory), reading the archive
                                 from S3 and writing the rows to S3 (a private moto server), not counting the
                                 archive's upload.
Rows from all of them are compared: `*_rows_match_reference` is false if any differs (and the command exits 1).
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

import polars as pl


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reference_job(archive: Path, start, end, out: Path, spec, classifier) -> None:
    """The replay job's work in one process: read every file, compute, write the table (no Beam)."""
    from pipelines.archive.reader import list_files, read_file
    from pipelines.rewards.assemble import assemble_rewards
    from pipelines.rewards.frames import concat_frames, conform
    from pipelines.rewards.replay_job import read_until
    from pipelines.rewards.sink import write_partition

    until = read_until(end, spec)
    frames = concat_frames({f.event_type: conform(read_file(archive, f, start, until), f.event_type)}
                           for f in list_files(archive, None, start, until))
    rows = assemble_rewards(frames, spec, classifier, until).rows
    rows = rows.filter((pl.col("request_time") >= start) & (pl.col("request_time") < end))
    for (version,), part in sorted(rows.partition_by("policy_version", as_dict=True).items()):
        write_partition(out, "reference", version, [part])


def run(n_requests: int, kafka: bool = True, shards: int | None = None, log: Callable[[str], None] = print,
        dask_workers: int = 2) -> dict:
    from pipelines.archive.importer import import_frames
    from pipelines.rewards import replay_job
    from pipelines.rewards.assemble import assemble_rewards
    from pipelines.rewards.classifiers import get_classifier
    from schemas.reward_table import read_reward_table
    from pipelines.rewards.spec import RewardSpec
    from pipelines.rewards.synthetic import T0, synthetic_frames

    spec = RewardSpec()
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-rewards-"))
    try:
        # spread the requests over three maturity delays of event time, so a cycle's range has mature rows
        spacing = max(1, int(3 * spec.maturity_delay_s(question=True) * 1000 / n_requests))
        frames = synthetic_frames(n_requests, spacing_ms=spacing)
        events = sum(f.height for f in frames.values())
        last = frames["trajectory"]["event_time"].max()
        start, end = T0, last + timedelta(microseconds=1)
        log(f"bench: {events} events for {n_requests} requests")
        classifier = get_classifier(spec.classifier)
        assemble_rewards(frames, spec, classifier, None)  # warm-up: the classifier and polars' first calls
        t0 = time.perf_counter()
        ref = assemble_rewards(frames, spec, classifier, None).rows
        t_compute = time.perf_counter() - t0
        import_frames(tmp / "archive", frames)
        t0 = time.perf_counter()
        _reference_job(tmp / "archive", start, end, tmp / "reference", spec, classifier)
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = replay_job.run(tmp / "archive", start, end, tmp / "replay", spec, shards=shards)
        t_replay = time.perf_counter() - t0
        replayed = read_reward_table(tmp / "replay")
        result = {"events": events, "requests": n_requests, "rows": ref.height,
                  "reference_polars_events_per_s": round(events / t_ref, 1),
                  "reference_compute_only_events_per_s": round(events / t_compute, 1),
                  "replay_events_per_s": round(events / t_replay, 1),
                  "replay_vs_reference": round(t_ref / t_replay, 3),
                  "replay_vs_compute_only": round(t_compute / t_replay, 3),
                  "reference_rows_match": read_reward_table(tmp / "reference").sort("request_id").equals(
                      ref.sort("request_id")),
                  "replay_rows_match_reference": replayed.sort("request_id").equals(ref.sort("request_id")),
                  "replay_counters": s.counters}
        log(f"bench: reference job {t_ref:.2f}s (compute alone {t_compute:.2f}s), replay {t_replay:.2f}s")
        if dask_workers:
            result |= _dask(tmp, frames, start, end, spec, ref, shards, dask_workers, log)
        if kafka:
            result |= _offset_range(tmp, frames, spec, ref, shards, log)
        result["peak_rss_mb"] = round(_peak_rss_mb(), 1)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _offset_range(tmp: Path, frames: dict[str, pl.DataFrame], spec, ref: pl.DataFrame, shards, log) -> dict:
    from infra.bench.ports import free_port
    from infra.config import load_config
    from infra.stack.stack import Stack
    from pipelines.rewards.cycle_job import run_cycle
    from schemas.reward_table import read_reward_table
    from schemas import topic_for

    cfg = load_config(None, [f'state_dir="{tmp / "state"}"', f"kafka.port={free_port(pair=True)}"])
    stack = Stack(cfg)
    stack.up(log=lambda *_: None)
    try:
        from kafka import KafkaProducer

        from schemas.kafka_clients import kafka_client_args

        producer = KafkaProducer(**kafka_client_args(cfg.kafka), acks="all", linger_ms=20,
                                 batch_size=512 * 1024)
        n = 0
        for t, f in frames.items():
            topic = topic_for(t)
            for row in f.drop("event_date").write_ndjson().splitlines():
                producer.send(topic, value=row.encode())
                n += 1
        producer.flush()
        producer.close()
        log(f"bench: produced {n} events; running a cycle over the range")
        t0 = time.perf_counter()
        m = run_cycle("bench", cfg.kafka, cfg.state_path / "rewards", tmp / "cycle", spec, shards=shards,
                      idle_s=2.0, log=lambda *_: None)
        t_cycle = time.perf_counter() - t0 - 2.0  # minus the idle wait that ends the range
        got = read_reward_table(tmp / "cycle")
        expected = ref.filter(pl.col("mature_time") <= pl.lit(m.as_of).str.to_datetime(time_zone="UTC"))
        return {"offset_range_events_per_s": round(n / t_cycle, 1), "offset_range_rows": got.height,
                "offset_range_rows_match_reference": got.sort("request_id").equals(expected.sort("request_id"))}
    finally:
        stack.down(log=lambda *_: None)


def _dask(tmp: Path, frames: dict[str, pl.DataFrame], start, end, spec, ref: pl.DataFrame, shards, workers: int,
          log) -> dict:
    import os

    from dask.distributed import LocalCluster

    from infra.bench.ports import free_port
    from infra.stack.broker import BUCKET, S3_CREDENTIALS, ObjectStore
    from infra.stack.config import KafkaConfig
    from pipelines.archive.importer import import_frames
    from pipelines.rewards import replay_job
    from schemas.reward_table import read_reward_table

    store = ObjectStore(KafkaConfig(port=free_port(pair=True)), tmp / "s3")   # moto on kafka.port + 1
    store.start()
    env = {**S3_CREDENTIALS, "AWS_ENDPOINT_URL_S3": store.url, "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)              # the workers (spawned below) inherit it
    cluster = None
    try:
        archive, out = f"s3://{BUCKET}/bench/archive", f"s3://{BUCKET}/bench/dask-rewards"
        import_frames(archive, frames)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        args = ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]
        from pipelines.rewards.runner_config import with_runner_alias

        t0 = time.perf_counter()
        replay_job.run(archive, start, end, out, spec, shards=shards or 2 * workers, beam_args=with_runner_alias(args))
        t_dask = time.perf_counter() - t0
        got = read_reward_table(out)
        events = sum(f.height for f in frames.values())
        log(f"bench: DaskRunner ({workers} workers, S3 in and out) {t_dask:.2f}s")
        return {"dask_workers": len(cluster.workers), "dask_events_per_s": round(events / t_dask, 1),
                "dask_rows_match_reference": got.sort("request_id").equals(ref.sort("request_id"))}
    finally:
        if cluster is not None:
            cluster.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        store.proc.stop()
