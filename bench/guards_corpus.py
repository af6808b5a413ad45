"""Precision and recall of each built-in guardrail detector over the test corpus
(``tests/guards/corpus.py``: positives, and near misses that must be left alone).

    .venv/bin/python bench/guards_corpus.py

A positive counts as found when the detector matches it whole inside each of the corpus's
frames; any match of a detector inside another sample (a negative, or another detector's
positive) is a false positive. Not a timing: it prints counts.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.guards.corpus import scores


def main() -> None:
    print(f"{'detector':<14}{'precision':>10}{'recall':>8}   tp  fp  fn")
    for name, (tp, fp, fn) in scores().items():
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        print(f"{name:<14}{precision:>10.3f}{recall:>8.3f}  {tp:>3} {fp:>3} {fn:>3}")


if __name__ == "__main__":
    main()
