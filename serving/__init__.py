"""vLLM serving with A/B arms, logprobs and hot swap (docs/serving.md).

    config.py    [serving]: endpoint, arms (name, registry alias, share), sampling, engine settings
    router.py    sticky user → arm assignment (BLAKE2b of experiment + user over the cumulative shares)
    protocol.py  the OpenAI request/response contract and the trajectory event, as pure functions
    engine.py    one vLLM AsyncLLM per registry version (processed logprobs of the sampled tokens)
    arms.py      arms → aliases → engines; the alias poller and blue/green hot swaps
    app.py       the Starlette gateway: /v1/chat/completions, /v1/models, /health
    server.py    the production wiring (registry, vLLM loader, telemetry SDK → Kafka) and the uvicorn server
    testing.py   a tiny random-init Llama checkpoint with the chat format's tokenizer, for tests and benchmarks

Run it with `rtrl serve [--detach]`; measure it with `rtrl bench serving --json`. Importing this package (and
`serving.config`) is light; vLLM, torch and transformers load only when an engine is built.
"""
