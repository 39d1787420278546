"""The redactor on a corpus: every secret shape is removed (and marked), ordinary code comes back unchanged, and
the recall and false positives published in docs/security.md are the measured ones."""

import re
from pathlib import Path

import pytest

from instrumentation.redaction import looks_random, redact, shannon_entropy
from tests.unit.instrumentation.redaction_corpus import NEGATIVES, SECRETS, leaked, measure

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


@pytest.mark.parametrize("case, text, secret", SECRETS, ids=[c[0] for c in SECRETS])
def test_secret_does_not_survive_and_is_marked(case, text, secret):
    out, n = redact(text)
    assert not leaked(secret, out), out[:500]
    assert "[REDACTED:" in out and n >= 1


@pytest.mark.parametrize("case, text", NEGATIVES, ids=[c[0] for c in NEGATIVES])
def test_ordinary_code_comes_back_unchanged(case, text):
    assert redact(text) == (text, 0)


def test_corpus_has_at_least_eighty_secret_shapes_and_forty_negatives():
    assert len({c[0] for c in SECRETS}) == len(SECRETS) >= 80
    assert len({c[0] for c in NEGATIVES}) == len(NEGATIVES) >= 40


def test_published_recall_and_false_positives_are_the_measured_ones():
    section = DOC.read_text().split("## Redaction recall", 1)[1].split("\n## ", 1)[0]
    recall = re.search(r"recall (\d+)/(\d+)", section, re.I)
    false_positives = re.search(r"false positives (\d+)/(\d+)", section, re.I)
    assert recall and false_positives, "the Redaction recall section states `recall X/Y` and `false positives A/B`"
    m = measure()
    assert (int(recall[1]), int(recall[2])) == (m["removed"], m["secrets"]), m
    assert (int(false_positives[1]), int(false_positives[2])) == (m["false_positives"], m["negatives"]), m


def test_leak_check_counts_a_surviving_tail():
    secret = "A1b2C3d4E5f6G7h8"
    assert leaked(secret, "x " + secret[-8:]) and leaked("short", "a short one") and not leaked(secret, "gone")


def test_marker_names_the_kind_of_secret():
    assert redact("key AKIAIOSFODNN7EXAMPLE")[0] == "key [REDACTED:aws_access_key_id]"
    assert redact("x = 'ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2'")[0] == "x = '[REDACTED:github_token]'"


def test_url_password_keeps_user_and_host():
    out, n = redact("postgres://admin:hunter2x@db.internal:5432/app")
    assert out == "postgres://admin:[REDACTED:url_password]@db.internal:5432/app" and n == 1


def test_assignment_keeps_key_and_quotes():
    assert redact('password = "hunter2"') == ('password = "[REDACTED:assignment]"', 1)
    assert redact("PASSWORD: hunter2") == ("PASSWORD: [REDACTED:assignment]", 1)


def test_cut_off_private_key_is_replaced_up_to_the_end_of_its_key_material():
    text = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n\nwhy does ssh reject it?"
    assert redact(text) == ("[REDACTED:private_key]\n\nwhy does ssh reject it?", 1)


def test_private_key_block_is_replaced_whole_and_text_around_it_survives():
    text = "before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----\nafter"
    assert redact(text) == ("before\n[REDACTED:private_key]\nafter", 1)


def test_counts_every_secret_in_a_text():
    text = "a=AKIAIOSFODNN7EXAMPLE b=AKIAI44QH8DHBEXAMPLE\nPASSWORD=sunshine"
    out, n = redact(text)
    assert n == 3 and out.count("[REDACTED:") == 3


def test_redacting_twice_changes_nothing_more():
    once, n = redact("\n".join(text for _, text, _ in SECRETS))
    assert n >= len(SECRETS) and redact(once) == (once, 0)


def test_a_value_longer_than_any_bound_is_replaced_whole():
    for value in ("Ab3_" * 80, "Ab3_" * 300):  # past ASSIGN_TAIL's 256 for an unquoted value, and far past
        assert redact(f"client_secret: {value}\nnext: 1") == ("client_secret: [REDACTED:assignment]\nnext: 1", 1)
        assert redact(f'password = "{value}"') == ('password = "[REDACTED:assignment]"', 1)
        assert redact(f"API_TOKEN={value} ./run") == ("API_TOKEN=[REDACTED:assignment] ./run", 1)
    assert redact("Authorization: Bearer " + "a1B2" * 2000) == ("Authorization: Bearer [REDACTED:authorization]", 1)
    assert redact("k ghp_" + "A1b2" * 100) == ("k [REDACTED:github_token]", 1)  # was missed whole past 255


def test_short_flag_password_keeps_the_command():
    assert redact("mysql -uroot -pS3cr3tPass shop") == ("mysql -uroot -p[REDACTED:cli_secret] shop", 1)
    assert redact("curl -u admin:S3cretPw https://x.org") == ("curl -u admin:[REDACTED:cli_secret] https://x.org", 1)
    assert redact("ssh -p 2222 host && mysql -h db -p shop") == ("ssh -p 2222 host && mysql -h db -p shop", 0)
    assert redact("echo -pX1y2 | mysql -u root") == ("echo -pX1y2 | mysql -u root", 0)  # another command's flag


def test_url_keys_keep_the_url():
    dsn = "https://a4269c5557868796c6b928787fbb5917@o1.ingest.sentry.io/2"
    assert redact(dsn) == ("https://[REDACTED:url_token]@o1.ingest.sentry.io/2", 1)
    url = "https://api.telegram.org/bot7123456789:AAE42TMKVd5KdcORt9s_OqyMTx_qzlWi5Xn/sendMessage"
    assert redact(url) == ("https://api.telegram.org/bot[REDACTED:telegram_bot_token]/sendMessage", 1)


def test_a_plain_word_is_a_password_under_an_ini_section_and_code_without_one():
    assert redact("password = tangerine\n") == ("password = tangerine\n", 0)
    assert redact("[client]\npassword = tangerine\n") == ("[client]\npassword = [REDACTED:assignment]\n", 1)
    assert redact("[client]\npassword = get_password()\n") == ("[client]\npassword = get_password()\n", 0)


def test_discord_token_needs_an_id_part_that_decodes_to_digits():
    token = "MTIzNDU2Nzg5MDEyMzQ1Njc4.Yd5NnD.RGTn0gsPRvFj2IqnTC6LXb3cF9E"
    assert redact(token) == ("[REDACTED:discord_bot_token]", 1)
    not_an_id = "M2QtbW9kZWwtYXNzZXQtdjEtcHJvZA.Yd5NnD.RGTn0gsPRvFj2IqnTC6LXb3cF9E"  # base64 of words
    assert redact(not_an_id) == (not_an_id, 0)


def test_bare_aws_secret_needs_a_slash_or_plus_or_context():
    bare = "x0EY91LgoTzNu39QOWRXbRjaI6m1F7Uky8lSSCRE"  # 40 alphanumerics: could be an identifier
    assert redact(f"value {bare} here") == (f"value {bare} here", 0)
    assert redact(f"the aws one is {bare}") == ("the aws one is [REDACTED:aws_secret_access_key]", 1)
    assert redact("J9GnC1khTskCYme9Sq+BEo/eJDT2pyYRwC3AW1DD") == ("[REDACTED:aws_secret_access_key]", 1)


@pytest.mark.parametrize("unit", ["password=$", "password=", "sk-", "mysql -u ", "curl -u a ", "sshpass ", "a:5432:",
                                  "MTIzNDU2Nzg5MDEyMzQ1Njc4.abcdef.", "machine x login ", "[s]\npassword = ", "://",
                                  "password=\"", "Ab3+", "bot123456789"])
def test_repeated_rule_prefixes_do_not_make_the_scan_quadratic(unit):
    text = unit * (20_000 // len(unit))  # quadratic scans of this take seconds; linear ones a few milliseconds
    out, n = redact(text)
    assert redact(out) == (out, 0)


def test_entropy_separates_random_tokens_from_words():
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    assert looks_random("q7Lm2Xz9Rt4Vb8Nc1Wd6Ks3Jp0")
    assert not looks_random("handleUserAuthenticationSuccess")
    assert not looks_random("e83c5163316f89bfbde7d9ab23ca2e25604af290")  # hex: a hash, decided not secret


def test_large_text_without_secrets_is_returned_as_is():
    text = "def f(x):\n    return x + 1\n" * 5000
    assert redact(text) == (text, 0)
