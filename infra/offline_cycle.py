"""An offline cycle: a checkpoint serves the simulated users in-process, their events become reward rows.

    policy = LocalPolicy(folder, version="1")
    events = simulate_traffic(policy, SimulatorConfig(...), hours=3)      # users' events + the trajectories
    rows = reward_rows(events, RewardSpec())                               # the reward spec, one pass

The same path as production minus the processes: `LocalPolicy` samples like serving does (temperature 1,
untruncated, the chat template of the checkpoint, the tool-call protocol's strict parser) and logs the
trajectory serving would log; the users are the simulator's (deterministic clock); the rows come from the reward
job's own computation (`assemble_rewards`). Used by the trainer's policy-improvement test and experiments; the
real loop (vLLM serving, Kafka, the Beam job) is `rtrl demo`.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from codetasks.policy import PolicyReply, PolicyRequest
from schemas.chat_format import to_text_messages
from schemas.events import Event, Trajectory
from schemas.tool_protocol import parse_response

NAMESPACE = uuid.UUID("3f0c2a6e-0d4b-4e57-9a43-6f1b8e2d7c15")


COMPACT_AT = 0.75    # a batch drops its finished rows once at most this share of them still runs


class _Job:
    """One request waiting for its batch."""

    def __init__(self, prompt_ids: list[int], seed: int):
        self.prompt_ids, self.seed = prompt_ids, seed
        self.completion: list[int] = []
        self.logps: list[float] = []
        self.done = False
        self.error: BaseException | None = None


class LocalPolicy:
    """The simulator's Policy protocol over a Hugging Face checkpoint, sampled in this process (a Llama checkpoint
    with `trainer.decode.LlamaDecoder`, any other with transformers' forward, one sequence at a time).

    Callers inside `participant()` blocks are answered in lockstep batches: a batch is decoded when every
    participant waits for an answer (`expect(n)` counts them before their threads start), so which requests share a
    batch depends only on the callers, not on timing.
    A request's sample is drawn with its own seed (`request.seed`, else one derived from the policy's seed, the user
    and the user's request count, not the checkpoint), by inverse-CDF sampling at temperature 1 from the whole
    distribution: the same answers whatever batch a request lands in, up to floating-point rounding."""

    def __init__(self, folder: str | Path, version: str, arm: str = "treatment", seed: int = 0,
                 max_new_tokens: int = 192, annotate: bool = False, max_batch: int = 64,
                 max_batch_tokens: int = 24_576, record: bool = True, temperature: float = 1.0):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trainer.decode import LlamaDecoder

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self.version, self.arm, self.max_new_tokens, self.seed = version, arm, max_new_tokens, seed
        self.temperature = temperature     # serving.temperature: 1.0 for training traffic
        self.max_batch, self.max_batch_tokens = max_batch, max_batch_tokens
        self.decoder = LlamaDecoder(self.model) if LlamaDecoder.supports(self.model) else None
        self.trajectories: list[Trajectory] = []     # what serving would log (none without `record`: evaluation)
        self.record = record
        # with `annotate`: request_id -> what the simulator knows and the reward table does not (offline_ab.py)
        self.annotate, self.annotations = annotate, {}
        self._requests: Counter[str] = Counter()   # per user: request ids and seeds do not depend on interleaving
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Job] = []
        self._members = 0
        self._reserved = 0       # places counted by `expect` that no thread has claimed yet
        self._busy = False
        self._local = threading.local()
        self.batches = 0

    # -- batching ----------------------------------------------------------------------------------------------
    def expect(self, n: int) -> None:
        """Count `n` participants before their threads start, so that no batch goes out before every one of them
        has asked (each thread then enters `participant()`, which claims one of these places)."""
        with self._cond:
            self._members += n
            self._reserved += n

    @contextmanager
    def participant(self):
        """The calling thread takes part in lockstep batching until the block ends."""
        with self._cond:
            if self._reserved:
                self._reserved -= 1
            else:
                self._members += 1
        self._local.member = True
        try:
            yield self
        finally:
            self._local.member = False
            with self._cond:
                self._members -= 1
                self._cond.notify_all()

    def _answer(self, job: _Job) -> None:
        """Queue `job` and return once it is decoded, decoding the batch on this thread when it completes it."""
        joined = getattr(self._local, "member", False)
        with self._cond:
            if not joined:
                self._members += 1
            self._queue.append(job)
            try:
                while not job.done:
                    if self._busy or len(self._queue) < self._members:
                        self._cond.wait()
                        continue
                    batch, self._queue, self._busy = self._queue, [], True
                    self._cond.release()
                    error = None
                    try:
                        self._decode(batch)
                    except BaseException as e:  # noqa: BLE001 -- every caller of the batch gets the error
                        error = e
                    finally:
                        self._cond.acquire()
                    for j in batch:
                        j.done, j.error = True, error
                    self._busy = False
                    self.batches += 1
                    self._cond.notify_all()
            finally:
                if not joined:
                    self._members -= 1
                    self._cond.notify_all()
        if job.error is not None:
            raise job.error

    def _decode(self, jobs: list[_Job]) -> None:
        """Decode the jobs in batches of similar prompt lengths (at most max_batch rows and max_batch_tokens
        padded prompt tokens each)."""
        order = sorted(jobs, key=lambda j: len(j.prompt_ids))
        chunk: list[_Job] = []
        for job in order:
            if chunk and (len(chunk) == self.max_batch
                          or len(job.prompt_ids) * (len(chunk) + 1) > self.max_batch_tokens):
                self._sample_rows(chunk)
                chunk = []
            chunk.append(job)
        if chunk:
            self._sample_rows(chunk)

    # -- sampling ----------------------------------------------------------------------------------------------
    def _uniforms(self, jobs: list[_Job]):
        import torch

        return torch.stack([torch.rand(self.max_new_tokens, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(j.seed)) for j in jobs])

    def _sample_rows(self, jobs: list[_Job]) -> None:
        """Each job's completion (up to and including eos) and the log-prob of each sampled token."""
        import torch

        if self.decoder is None:
            for job in jobs:
                self._sample_one(job)
            return
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        pad = pad if pad is not None else (eos or 0)
        u = self._uniforms(jobs)
        rows = torch.arange(len(jobs))          # the decoder's rows: which job each one is
        alive = torch.ones(len(jobs), dtype=torch.bool)
        with torch.no_grad():
            logits = self.decoder.prefill([j.prompt_ids for j in jobs], pad)
            for t in range(self.max_new_tokens):
                tok, logp = _inverse_cdf(logits, u[rows, t], self.temperature)
                owners, tokens, logps = rows.tolist(), tok.tolist(), logp.tolist()   # one conversion per step
                for i in alive.nonzero().flatten().tolist():
                    jobs[owners[i]].completion.append(tokens[i])
                    jobs[owners[i]].logps.append(logps[i])
                alive &= tok != eos
                if not alive.any() or t + 1 == self.max_new_tokens:
                    break
                if int(alive.sum()) <= COMPACT_AT * len(rows):   # drop the finished rows from the batch
                    keep = alive.nonzero().flatten()
                    self.decoder.keep(keep)
                    rows, tok, alive = rows[keep], tok[keep], alive[keep]
                logits = self.decoder.step(torch.where(alive, tok, torch.full_like(tok, pad)))

    def _sample_one(self, job: _Job) -> None:
        """One job with transformers' forward and its cache (models LlamaDecoder does not decode)."""
        import torch

        u = self._uniforms([job])
        ids, past = torch.tensor([job.prompt_ids]), None
        with torch.no_grad():
            for t in range(self.max_new_tokens):
                res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                tok, logp = _inverse_cdf(res.logits[:, -1], u[:, t], self.temperature)
                job.completion.append(int(tok[0]))
                job.logps.append(float(logp[0]))
                if int(tok[0]) == self.tokenizer.eos_token_id:
                    break
                ids = tok.view(1, 1)

    def _sample(self, prompt_ids: list[int], seed: int = 0) -> tuple[list[int], list[float]]:
        """One prompt's completion and log-probs, drawn with `seed` (a batch of one)."""
        job = _Job(list(prompt_ids), seed)
        self._answer(job)
        return job.completion, job.logps

    def respond(self, request: PolicyRequest) -> PolicyReply:
        t0 = time.perf_counter()
        prompt = self.tokenizer.apply_chat_template(to_text_messages(request.messages), add_generation_prompt=True,
                                                    tokenize=False)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with self._cond:
            self._requests[request.user] += 1
            n = self._requests[request.user]
        request_id = str(uuid.uuid5(NAMESPACE, f"{self.version}:{request.user}:{n}"))
        # the same user's n-th request draws the same uniforms under every checkpoint (common random numbers): two
        # checkpoints that agree on a token's distribution agree on the token, so paired differences are sharper
        seed = request.seed if request.seed is not None else _seed_of(f"{self.seed}:{request.user}:{n}")
        completion, logps = self._sample(prompt_ids, seed)
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        parsed = parse_response(text)
        reply = PolicyReply(request_id, parsed, text, self.version, self.arm, len(completion), len(prompt_ids))
        if not self.record:
            return reply
        m = request.metadata
        private = bool(m.get("privacy_mode"))
        trajectory = Trajectory(
            event_id=str(uuid.uuid5(NAMESPACE, "trajectory:" + request_id)), event_time=m["event_time"],
            user_id=request.user, org_id=m["org_id"], workspace_id=m["workspace_id"], session_id=m["session_id"],
            privacy_mode=private, client_version="offline-cycle", request_id=request_id,
            policy_version=self.version, arm=self.arm, prompt_token_ids=[] if private else list(prompt_ids),
            completion_token_ids=[] if private else completion, behaviour_logprobs=[] if private else logps,
            tool_calls=parsed.records, latency_ms=(time.perf_counter() - t0) * 1000, prompt_tokens=len(prompt_ids),
            completion_tokens=len(completion), response_kind=parsed.kind, task_id=m.get("task_id"))
        with self._cond:
            self.trajectories.append(trajectory)
            if self.annotate:
                task = request.task
                self.annotations[request_id] = {
                    "turn": 1 + sum(msg["role"] == "assistant" for msg in request.messages),
                    "task_kind": getattr(task, "kind", None), "ambiguous": getattr(task, "ambiguous", None)}
        return reply


def _seed_of(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:7], "big")


def _inverse_cdf(logits, u, temperature: float = 1.0):
    """Per row, the token whose cumulative probability first exceeds u (at `temperature`, nothing truncated), and
    its log-prob under the distribution it was drawn from (serving logs the same). Temperature 0: the argmax."""
    import torch

    if temperature == 0:
        logp = torch.log_softmax(logits.float(), -1)
        tok = logp.argmax(-1)
        return tok, logp.gather(1, tok.view(-1, 1)).squeeze(1)
    logp = torch.log_softmax(logits.float() / temperature, -1)
    cdf = logp.exp().cumsum(-1)
    target = (u.view(-1, 1) * cdf[:, -1:].double()).to(cdf.dtype)
    tok = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp(max=cdf.shape[-1] - 1)
    return tok, logp.gather(1, tok.view(-1, 1)).squeeze(1)


def simulate_traffic(policy: LocalPolicy, cfg, hours: float, only: range | None = None) -> list[Event]:
    """Run the simulated population against `policy` for `hours` of simulated time (deterministic clock, a thread
    per user, answered in lockstep batches); the users' events and the policy's trajectories, in event-time
    order. `only`: just these users of the population."""
    return _run_population(policy, cfg, hours, only)[0]


def _run_population(policy: LocalPolicy, cfg, hours: float, only: range | None):
    from instrumentation.simulator.clock import StepClock
    from instrumentation.simulator.population import Population
    from instrumentation.simulator.user import ListSink

    clock = StepClock(latency_s=cfg.deterministic_latency_s)
    sink = ListSink()
    population = Population(cfg, policy, sink, clock, concurrent=True, only=only)
    population.run(clock.start + timedelta(hours=hours))
    events = sorted([*sink.events, *policy.trajectories], key=lambda e: (e.event_time, e.event_id))
    return events, population


@dataclass
class Served:
    """What a checkpoint's run on a population gave: every event (the users' and the trajectories), the policy's
    annotations (with `annotate`), its request and batch counts, and the simulator's grades of its answers
    (outcome -> count: correct, wrong, broken, question, ...)."""

    events: list[Event]
    annotations: dict
    requests: int
    batches: int
    outcomes: dict


class ServingWorkers:
    """`n` processes that serve slices of a population, each on one torch thread; started on first use and kept for
    every later `serve` call until `close` (a loop of many serving runs pays the processes' start-up, ~5 s of
    imports here, once). With `n` = 1 the slice is served in this process."""

    def __init__(self, n: int):
        self.n = max(1, n)
        self._pool = None

    def map(self, calls: list[tuple]) -> list[Served]:
        if len(calls) == 1:
            return [_serve_slice(*calls[0])]
        if self._pool is None:
            import multiprocessing

            self._pool = multiprocessing.get_context("spawn").Pool(self.n)
        return self._pool.starmap(_serve_slice, calls)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> "ServingWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve(folder: str | Path, version: str, sim, hours: float, seed: int, *, arm: str = "treatment",
          annotate: bool = False, jobs: "int | ServingWorkers" = 1, only: range | None = None,
          max_tokens: int = 192, temperature: float = 1.0) -> Served:
    """`folder`, as version `version`, serving the population `sim` (its users `only`: default all) for `hours`.
    A user's story does not depend on which others run beside it. With `jobs` > 1 (a count, or
    `ServingWorkers` kept across calls) the users are split into that many slices, each served by a process of its
    own on one torch thread (two such processes do ~1.45x the work of one on two threads here); a request's sample
    depends only on its user and seed, so the events are the same either way (up to floating-point rounding in a
    batch). `max_tokens`, `temperature`: serving's (serving.max_tokens, serving.temperature)."""
    if not isinstance(jobs, ServingWorkers):
        with ServingWorkers(jobs) as workers:
            return serve(folder, version, sim, hours, seed, arm=arm, annotate=annotate, jobs=workers, only=only,
                         max_tokens=max_tokens, temperature=temperature)
    users = range(sim.users) if only is None else only
    n = max(1, min(jobs.n, len(users)))
    slices = [users[i::n] for i in range(n)]
    calls = [(str(folder), version, sim, hours, seed, arm, annotate, s, 1 if n > 1 else 0, max_tokens, temperature)
             for s in slices]
    parts = jobs.map(calls)
    events = sorted((e for p in parts for e in p.events), key=lambda e: (e.event_time, e.event_id))
    outcomes: Counter[str] = Counter()
    for p in parts:
        outcomes.update(p.outcomes)
    return Served(events, {k: v for p in parts for k, v in p.annotations.items()}, sum(p.requests for p in parts),
                  sum(p.batches for p in parts), dict(outcomes))


def _serve_slice(folder: str, version: str, sim, hours: float, seed: int, arm: str, annotate: bool, only: range,
                 threads: int, max_tokens: int = 192, temperature: float = 1.0) -> Served:
    if threads:
        import torch

        torch.set_num_threads(threads)
    policy = LocalPolicy(folder, version=version, arm=arm, seed=seed, annotate=annotate, max_new_tokens=max_tokens,
                         temperature=temperature)
    events, population = _run_population(policy, sim, hours, only)
    return Served(events, policy.annotations, len(policy.trajectories), policy.batches,
                  dict(population.stats.outcomes))


def reward_rows(events: list[Event], spec, as_of: datetime | None = None) -> pl.DataFrame:
    """The reward rows of every request mature by `as_of` (default: all of them), as the reward job computes."""
    return rewards_and_outcomes(events, spec, as_of, outcomes=False)[0]


def rewards_and_outcomes(events: list[Event], spec, as_of: datetime | None = None,
                         outcomes: bool = True) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(reward rows, task-outcome rows) mature by `as_of` (default: all of them), as the reward job computes them
    (`assemble_rewards`, `assemble_outcomes`); the outcome rows are None without `outcomes`. A population run
    drains (`Population.run`), so every background task started before its deadline has its `task_outcome` in
    `events`: with the default `as_of` each such task's requests have a known outcome row."""
    from pipelines.rewards.assemble import assemble_rewards
    from pipelines.rewards.classifiers import get_classifier
    from pipelines.rewards.frames import frames_from_events
    from pipelines.rewards.outcomes import assemble_outcomes

    end = as_of or datetime(9000, 1, 1, tzinfo=timezone.utc)
    frames = frames_from_events(events)
    rows = assemble_rewards(frames, spec, get_classifier(spec.classifier), end).rows
    return rows, (assemble_outcomes(frames, spec, end)[0] if outcomes else None)
