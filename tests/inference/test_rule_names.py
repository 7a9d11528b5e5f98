"""A rejection rule's name is compared only inside its own class: everything else asks the rule
(``needs_features``, ``scores_logits``, ...) or names it through a constant the rule owns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lightning_cls
from lightning_cls.inference.reject_rules import REJECT_RULES

PACKAGE = Path(lightning_cls.__file__).parent
RULES = PACKAGE / "inference" / "rules"


def name_uses(text: str, names: list[str]) -> list[str]:
    """The lines of ``text`` that compare with a rule's name or pass one as a score: ``==
    "energy"``, ``"knn" !=``, ``in ("knn", ...)`` (not a ``for`` loop's), ``confidence(logits,
    "msp")``, ``or "msp"``."""
    name = "|".join(map(re.escape, names))
    quoted = rf"""["']({name})["']"""
    patterns = [
        rf"(==|!=)\s*{quoted}",
        rf"{quoted}\s*(==|!=)",
        rf"confidence\([^\)]*{quoted}",
        rf"\bor\s+{quoted}",
    ]
    membership = re.compile(rf"\bin\s*[\(\[\{{][^\)\]\}}]*{quoted}")

    def compares(line: str) -> bool:
        if any(re.search(p, line) for p in patterns):
            return True
        return any(
            not re.search(r"\bfor\s+[\w\s,]+$", line[: m.start()])
            for m in membership.finditer(line)
        )

    return [
        line.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#") and compares(line)
    ]


def test_the_check_finds_each_kind_of_use():
    names = ["energy", "knn", "msp"]
    source = "\n".join([
        'if spec.decision.reject["score"] == "energy":',
        'if "knn" != score:',
        'if score in ("mahalanobis", "knn"):',
        'task.confidence(logits, "msp")',
        'score = score or "msp"',
        'PROBES = ("knn", "patches")',  # a tuple that is no comparison: another registry's
        'x = rule.name == MSP',
        'for score in ("energy", "msp"):',  # a loop over names: no comparison
    ])  # fmt: skip
    assert name_uses(source, names) == [
        'if spec.decision.reject["score"] == "energy":',
        'if "knn" != score:',
        'if score in ("mahalanobis", "knn"):',
        'task.confidence(logits, "msp")',
        'score = score or "msp"',
    ]


@pytest.mark.parametrize("folder", [PACKAGE, PACKAGE.parent / "benchmarks" / "ood.py"])
def test_no_rule_name_is_compared_outside_its_own_class(folder):
    """The library (and benchmarks/ood.py, which looks every score up in ``REJECT_RULES``)."""
    names = list(REJECT_RULES)
    assert {"msp", "energy", "knn", "react", "vim", "combined"} <= set(names)
    found = {
        str(path.relative_to(PACKAGE.parent)): uses
        for path in (sorted(folder.rglob("*.py")) if folder.is_dir() else [folder])
        if RULES not in path.parents
        and (uses := name_uses(path.read_text(encoding="utf-8"), names))
    }
    assert found == {}
