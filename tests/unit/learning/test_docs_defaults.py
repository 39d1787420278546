"""docs/learning.md's configuration table states the defaults `rtrl` loads (`[learning]`, `[gate.users]`)."""

import re
from pathlib import Path

from infra.config import load_config

DOC = Path(__file__).parents[3] / "docs" / "learning.md"


def test_the_learning_pages_table_gives_every_numeric_default_the_config_loads():
    cfg = load_config(None, [])
    sections = {"learning": cfg.learning, "gate.users": cfg.gate.users}
    rows = re.findall(r"^\| `(learning|gate\.users)\.(\w+)` \| ([^|]+) \|", DOC.read_text(), re.M)
    checked = 0
    for section, key, stated in rows:
        value = getattr(sections[section], key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(stated.strip()) == float(value), f"{section}.{key}: docs say {stated.strip()}, config {value}"
            checked += 1
    assert checked >= 12
    assert {k for s, k, _ in rows if s == "learning"} == set(type(cfg.learning).model_fields)
