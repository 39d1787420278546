"""Coverage-guided fuzzing with atheris (libFuzzer) of one parser, in its own process:

    python -m infra.bench.fuzz_atheris wire|tool_protocol RUNS SEED OUT.json CORPUS_DIR

The corpus starts from valid inputs (every schema fixture; well-formed tool calls), so mutations reach past the
first parse error; libFuzzer adds the inputs that find new coverage to CORPUS_DIR.

libFuzzer owns the process (it exits when done), so the summary -- cases, accepted, rejected by reason -- is
written to OUT.json as it goes. An exception other than the parser's documented rejection is a crash: atheris
prints the input and the traceback and the process exits non-zero.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def seed_corpus(target: str, folder: str) -> None:
    from pathlib import Path

    from infra.bench.fuzz_cases import FIXTURES
    from schemas.tool_protocol import TOOLS, ToolCall

    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    if target == "wire":
        seeds = [p.read_bytes() for p in sorted(FIXTURES.glob("*/v*.json"))]
    else:
        seeds = [ToolCall(name, {a: "app/util.py" for a, _ in spec.args}).text().encode() for name, spec in TOOLS.items()]
        seeds += [b"Which file do you mean?", b"Done."]
    for i, data in enumerate(seeds):
        (d / f"seed-{i}").write_bytes(data)


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["schemas"]):
        from schemas import SchemaError, parse_wire
        from schemas.tool_protocol import parse_response

    target, runs, seed, out, corpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    seed_corpus(target, corpus)
    from infra.bench.fuzz import check_event, check_tool_protocol, TargetResult
    from pipelines.archive.deadletter import reason_code

    state = {"cases": 0, "accepted": 0}
    rejected: Counter = Counter()

    def save() -> None:
        with open(out, "w") as f:
            json.dump({**state, "rejected": rejected}, f)

    def wire(data: bytes) -> None:
        try:
            event = parse_wire(data)
        except SchemaError as e:
            rejected[reason_code(e)] += 1
        else:
            check_event(event)
            state["accepted"] += 1

    def tools(data: bytes) -> None:
        text = data.decode("utf-8", "surrogateescape")  # invalid bytes become lone surrogates
        r = TargetResult()
        check_tool_protocol((text, None), r)
        rejected.update(r.rejected)
        state["accepted"] += r.accepted

    fn = {"wire": wire, "tool_protocol": tools}[target]

    def one(data: bytes) -> None:
        state["cases"] += 1
        fn(data)
        if state["cases"] % 1000 == 0 or state["cases"] >= runs:
            save()

    save()
    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-seed={seed + 1}", "-max_len=4096", "-rss_limit_mb=4096", corpus], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
