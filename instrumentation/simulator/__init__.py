"""The simulated user population (the client side of the loop): seeded workspaces and coding tasks,
users who react to the policy's answers, telemetry through the SDK like a real client, on a simulated clock.

    workspace.py    orgs with naming conventions, workspaces of small Python files, `apply_edit`
    tasks.py        coding requests (clear and ambiguous), reference answers, `grade`
    config.py       `[simulator]` in rtrl.toml
    clock.py        ScaledClock (speed x wall time) and StepClock (deterministic, no wall clock)
    policy.py       the policy protocol; OpenAIPolicy (any OpenAI-compatible endpoint), ReferencePolicy (tests)
    followups.py    what users write back (classified as meant by the reward job's classifier)
    user.py         one user's behaviour and the events it emits
    population.py   N users driven until a deadline; summary and progress line (`rtrl simulate`)

Nothing is imported here, so the CLI stays light.
"""
