"""The follow-up classifier (docs/rewards.md): the default rules, the registry, and its measured quality."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

from pipelines.rewards import classifiers
from pipelines.rewards.classifier_eval import DEFAULT_PATH, evaluate, load_labelled, main
from pipelines.rewards.classifiers import (
    FollowupClassifier,
    KeywordClassifier,
    get_classifier,
    known_classifiers,
    register_classifier,
)
from pipelines.rewards.spec import RewardSpec

# Measured on the held-out test split when the rules were frozen (kw-28a604a42a14, 277 rows):
#   dissatisfied          precision 0.948  recall 0.867
#   question_unnecessary  precision 0.958  recall 1.000
# The floors sit a little below, so a rule change that regresses the classifier fails here.
FLOORS = {
    "dissatisfied": {"precision": 0.88, "recall": 0.80},
    "question_unnecessary": {"precision": 0.88, "recall": 0.90},
}


def classify(*texts: str | None) -> list[tuple[bool, bool]]:
    out = get_classifier("keywords").classify(pl.Series("text", list(texts), dtype=pl.String))
    return list(zip(out["dissatisfied"].to_list(), out["question_unnecessary"].to_list()))


@pytest.mark.parametrize("text", [
    "that's not what I asked for",
    "Undo that.",
    "please revert the last change",
    "it's still broken",
    "Doesn't work",
    "wrong file, the handler lives in api/routes.py",
    "why did you delete my tests??",
    "no, I meant the footer",
    "this broke the build",
    "you deleted the migration",
    "ugh, same error as before",
    "NOPE",
    "the server crashes on startup now",
    "I didn't ask you to reformat the whole file",
])
def test_clear_complaints_are_dissatisfied(text):
    assert classify(text)[0][0] is True


@pytest.mark.parametrize("text", [
    "no worries, that's not wrong",
    "No problem!",
    "doesn't matter, either is fine",
    "nothing wrong with that, go ahead",
    "It's not broken, I just want it refactored",
    "the tests are failing on main already, not your fault",
    "Add an undo button to the editor toolbar",
    "how do I revert a merge commit?",
    "I broke something locally, can you help?",
    "thanks, that fixed it",
    "now add a test for it",
    "use snake_case",
    "the second one",
    "No, keep it synchronous",
])
def test_hard_negatives_are_not_dissatisfied(text):
    assert classify(text)[0][0] is False


@pytest.mark.parametrize("text", [
    "I already told you, it's Postgres",
    "obviously the first one",
    "just do it",
    "why are you asking? it's in the README",
    "you didn't need to ask, the type is in the signature",
    "stop asking and write the code",
    "as I said, tabs",
    "I said snake_case already",
])
def test_needless_question_replies_are_flagged(text):
    assert classify(text)[0][1] is True


@pytest.mark.parametrize("text", [
    "use snake_case",
    "the second one",
    "Postgres 15",
    "yes please",
    "doesn't matter",
    "no need, the old one is fine",
    "I said it works, thanks!",
    "can you explain why you asked about the schema?",
])
def test_plain_answers_are_not_needless_question_replies(text):
    assert classify(text)[0][1] is False


def test_null_and_empty_texts_are_neither():
    assert classify(None, "", "   ", "\n\t") == [(False, False)] * 4


def test_all_null_and_empty_series_are_accepted():
    clf = get_classifier("keywords")
    assert clf.classify(pl.Series([None, None])).rows() == [(False, False)] * 2
    empty = clf.classify(pl.Series([], dtype=pl.String))
    assert empty.height == 0 and empty.columns == ["dissatisfied", "question_unnecessary"]


def test_output_is_one_boolean_row_per_text_in_input_order():
    texts = ["thanks!", "revert that", None, "I already told you", "ok", "still broken", "obviously yes"]
    out = get_classifier("keywords").classify(pl.Series(texts))
    assert out.columns == ["dissatisfied", "question_unnecessary"]
    assert out.schema == {"dissatisfied": pl.Boolean, "question_unnecessary": pl.Boolean}
    assert out.rows() == [(False, False), (True, False), (False, False), (False, True), (False, False),
                          (True, False), (False, True)]
    # Reordering the input reorders the output the same way (no row depends on its neighbours).
    rev = get_classifier("keywords").classify(pl.Series(texts[::-1]))
    assert rev.rows() == out.rows()[::-1]


def test_quoted_text_and_pasted_code_do_not_decide_the_label():
    (quoted, _), (fenced, _) = classify(
        'The bug report says "the export button doesn\'t work", can you look into it?',
        "```\nTraceback: RuntimeError: still broken\n```\nadd this as a new test case",
    )
    assert quoted is False and fenced is False


def test_matching_is_case_insensitive_and_handles_curly_apostrophes():
    assert classify("THAT’S NOT WHAT I ASKED", "I Already Told You") == [(True, False), (False, True)]


def test_version_is_a_hash_of_the_rules_and_changes_with_them():
    default = KeywordClassifier()
    assert default.version == get_classifier("keywords").version and default.version.startswith("kw-")
    changed = KeywordClassifier(dissatisfied=classifiers._DISSATISFIED + (r"\bmeow\b",))
    assert changed.version != default.version
    assert changed.classify(pl.Series(["meow"]))["dissatisfied"].to_list() == [True]
    assert default.classify(pl.Series(["meow"]))["dissatisfied"].to_list() == [False]


def test_default_classifier_is_registered_and_satisfies_the_protocol():
    clf = get_classifier(RewardSpec().classifier)
    assert clf.name == "keywords"
    assert isinstance(clf, FollowupClassifier)


def test_unknown_classifier_name_raises_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown follow-up classifier 'nope'.*keywords"):
        get_classifier("nope")


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(classifiers, "_REGISTRY", dict(classifiers._REGISTRY))
    return classifiers._REGISTRY


def test_custom_classifier_can_be_registered_and_evaluated(registry, tmp_path):
    @register_classifier
    class Shouty:
        name = "shouty"
        version = "1"

        def classify(self, texts: pl.Series) -> pl.DataFrame:
            t = texts.cast(pl.String).fill_null("")
            shout = (t == t.str.to_uppercase()) & t.str.contains("[A-Z]")
            return pl.DataFrame({"dissatisfied": shout, "question_unnecessary": pl.repeat(False, len(t), eager=True)})

    assert "shouty" in known_classifiers()
    assert get_classifier("shouty").classify(pl.Series(["NO", "ok", None])).rows() == [
        (True, False), (False, False), (False, False)]

    path = tmp_path / "set.jsonl"
    rows = [("WRONG", True), ("ok", False), ("STILL BROKEN", True), ("bad", True), ("LGTM", False)]
    path.write_text("".join(json.dumps({"text": t, "dissatisfied": d, "question_unnecessary": False,
                                        "split": "test"}) + "\n" for t, d in rows))
    result = evaluate("shouty", path=path)
    assert result["classifier"] == "shouty" and result["version"] == "1" and result["rows"] == 5
    d = result["dissatisfied"]
    assert (d["tp"], d["fp"], d["fn"], d["tn"], d["support"]) == (2, 1, 1, 1, 3)
    assert (d["precision"], d["recall"]) == (pytest.approx(2 / 3, abs=1e-4), pytest.approx(2 / 3, abs=1e-4))
    q = result["question_unnecessary"]
    assert (q["precision"], q["recall"], q["f1"], q["support"], q["tn"]) == (0.0, 0.0, 0.0, 0, 5)


def test_registering_without_a_name_or_classify_is_rejected(registry):
    class Nameless:
        version = "1"

        def classify(self, texts):
            return texts

    class NoClassify:
        name = "x"
        version = "1"

    with pytest.raises(ValueError, match="name"):
        register_classifier(Nameless)
    with pytest.raises(ValueError, match="classify"):
        register_classifier(NoClassify)
    assert known_classifiers() == ["keywords"]


def test_labelled_set_is_large_varied_and_split():
    data = load_labelled(split="all")
    assert data.height >= 400
    assert data["text"].str.to_lowercase().n_unique() == data.height
    splits = Counter(data["split"].to_list())
    assert set(splits) == {"dev", "test"} and 0.3 <= splits["dev"] / data.height <= 0.5
    assert 0.25 <= data["dissatisfied"].mean() <= 0.45
    assert 0.10 <= data["question_unnecessary"].mean() <= 0.25
    assert load_labelled(split="test").height == splits["test"]
    with pytest.raises(ValueError, match="unknown split"):
        load_labelled(split="train")


def test_default_classifier_meets_its_measured_floors_on_the_held_out_split():
    result = evaluate("keywords", split="test")
    assert result["rows"] == load_labelled(split="test").height
    for label, floors in FLOORS.items():
        m = result[label]
        assert m["tp"] + m["fp"] + m["fn"] + m["tn"] == result["rows"]
        for metric, floor in floors.items():
            assert m[metric] >= floor, f"{label} {metric} {m[metric]} fell below {floor}: {m}"


def test_cli_prints_one_json_object(capsys):
    assert main(["--split", "dev", "--classifier", "keywords"]) == 0
    out = capsys.readouterr().out.strip()
    result = json.loads(out)
    assert "\n" not in out
    assert result["split"] == "dev" and result["version"] == get_classifier("keywords").version
    assert result["rows"] == load_labelled(split="dev").height
    assert set(result["dissatisfied"]) >= {"precision", "recall", "f1", "support", "tp", "fp", "fn", "tn"}


def test_cli_rejects_an_unknown_classifier(capsys):
    assert main(["--classifier", "nope"]) == 2
    assert "known: keywords" in capsys.readouterr().err


def test_data_file_ships_inside_the_package():
    assert DEFAULT_PATH.is_file() and DEFAULT_PATH.parent.parent.name == "rewards"
