"""Measure a follow-up classifier on the labelled set shipped in pipelines/rewards/data/ (docs/rewards.md).

The set (followups_labelled.jsonl) holds hand-written follow-up messages, one JSON object a line:
  {"text": str, "dissatisfied": bool, "question_unnecessary": bool, "split": "dev" | "test"}
"dev" rows were visible while the default rules were written; "test" rows are held out and are the figures
to quote.

    python -m pipelines.rewards.classifier_eval [--split test|dev|all] [--classifier NAME] [--path FILE]
        [--errors]

prints one JSON object: per label precision, recall, F1, support and the confusion counts (tp, fp, fn, tn),
plus the classifier's name and version and the row count (--errors adds the misclassified texts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

from pipelines.rewards.classifiers import OUTPUT_COLUMNS, FollowupClassifier, get_classifier

DEFAULT_PATH = Path(__file__).parent / "data" / "followups_labelled.jsonl"
SPLITS = ("test", "dev", "all")


def load_labelled(path: str | Path | None = None, split: str = "test") -> pl.DataFrame:
    """The labelled rows of `split` ("test", "dev" or "all") as a DataFrame (text, labels, split)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    path = Path(path) if path is not None else DEFAULT_PATH
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            for key, kind in (("text", str), ("dissatisfied", bool), ("question_unnecessary", bool)):
                if not isinstance(row.get(key), kind):
                    raise ValueError(f"{path}:{lineno}: field {key!r} must be {kind.__name__}")
            row.setdefault("split", "test")
            rows.append({k: row[k] for k in ("text", "dissatisfied", "question_unnecessary", "split")})
    df = pl.DataFrame(rows, schema={"text": pl.String, "dissatisfied": pl.Boolean,
                                    "question_unnecessary": pl.Boolean, "split": pl.String})
    return df if split == "all" else df.filter(pl.col("split") == split)


def _ratio(num: int, den: int) -> float:
    return round(num / den, 4) if den else 0.0


def _label_metrics(truth: pl.Series, pred: pl.Series) -> dict:
    tp = int((truth & pred).sum())
    fp = int((~truth & pred).sum())
    fn = int((truth & ~pred).sum())
    tn = int((~truth & ~pred).sum())
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": tp + fn,
            "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def evaluate(classifier: FollowupClassifier | str = "keywords", path: str | Path | None = None,
             split: str = "test", errors: bool = False) -> dict:
    """Precision / recall / F1 / support and confusion counts per label of `classifier` on `split`."""
    clf = get_classifier(classifier) if isinstance(classifier, str) else classifier
    data = load_labelled(path, split)
    pred = clf.classify(data["text"])
    if pred.height != data.height or any(c not in pred.columns for c in OUTPUT_COLUMNS):
        raise ValueError(f"classifier {clf.name!r} returned {pred.shape} with columns {pred.columns}; expected "
                         f"{data.height} rows with {OUTPUT_COLUMNS}")
    out: dict = {"classifier": clf.name, "version": clf.version, "split": split, "rows": data.height}
    for label in OUTPUT_COLUMNS:
        p = pred[label].cast(pl.Boolean).fill_null(False)
        out[label] = _label_metrics(data[label], p)
        if errors:
            out[label]["false_positives"] = data.filter(~data[label] & p)["text"].to_list()
            out[label]["false_negatives"] = data.filter(data[label] & ~p)["text"].to_list()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.rewards.classifier_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=SPLITS, default="test")
    ap.add_argument("--classifier", default="keywords", help="a registered follow-up classifier name")
    ap.add_argument("--path", default=None, help=f"labelled JSONL (default {DEFAULT_PATH})")
    ap.add_argument("--errors", action="store_true", help="list the misclassified texts")
    args = ap.parse_args(argv)
    try:
        result = evaluate(args.classifier, path=args.path, split=args.split, errors=args.errors)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
