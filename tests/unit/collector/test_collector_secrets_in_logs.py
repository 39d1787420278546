"""No secret in the collector's logs or answers: during auth failures (wrong bearer key, bad signature,
unknown client) and a Kafka outage with a valid key, nothing logged or answered holds
the API key, the key that was tried, or the signing key (the SHA-256 the keys file stores)."""

from __future__ import annotations

import logging

from schemas.api_keys import signing_key
from tests.unit.collector.conftest import valid_events

WRONG_KEY = "rtrl_" + "Wr0ngKeyWr0ngKeyWr0ngKeyWr0ngKey12"


def test_auth_failures_outages_and_key_file_errors_log_and_answer_no_key(harness, caplog):
    caplog.set_level(logging.DEBUG)
    h = harness
    answers = [
        h.post({"events": valid_events(1)}, h.bearer(WRONG_KEY), auth="none"),
        h.post({"events": valid_events(1)}, {"Authorization": f"bearer  {WRONG_KEY} extra"}, auth="none"),
        h.post({"events": valid_events(1)}, h.signed(b"another body"), auth="none"),
        h.post({"events": valid_events(1)}, h.signed(b"{}", client="nobody"), auth="none"),
    ]
    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    h.transport.fail = True
    answers.append(h.post({"events": valid_events(2)}))
    assert answers[-1].status_code == 503
    records = "\n".join(f"{r.name} {r.levelname} {r.getMessage()}" for r in caplog.records)
    assert "produce failed" in records  # the failures were logged ...
    secrets = (h.api_key, WRONG_KEY, signing_key(h.api_key).hex())
    for text in (records, *(a.text for a in answers), *(str(dict(a.headers)) for a in answers)):
        assert not any(s in text for s in secrets)  # ... without any key
