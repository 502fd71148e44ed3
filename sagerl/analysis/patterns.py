"""Reasoning patterns of completions: a taxonomy, an offline cue-phrase lexicon, and per-run shares.

Taxonomy (:data:`TAXONOMY`, descriptions in :data:`DESCRIPTIONS`): constraint setup, case analysis, proof by
contradiction, working backwards, substitution, enumeration / trial and error, verification / self-check,
modular arithmetic, symmetry or invariants, induction (and recursion), coordinate / geometric construction,
bounding / estimation, and direct computation. A completion may use several.

Classifiers (``classifier=``):

- ``"lexicon"`` (default for math text): :data:`LEXICON`, a table of cue regexes per pattern, matched
  against the lowercased text (so case-insensitive), with ``\\b`` word boundaries around word cues. A
  pattern is present when any of its cues matches. ``direct_computation`` is the label when no pattern
  other than ``verification`` fires (a self-check accompanies a strategy; it is not one), so every
  completion gets at least one label.
- ``"recorded"``: the record's own ``"strategy"`` field (written by tasks that know each completion's
  strategy exactly, such as planted-strategy tasks) is its one label (``unlabeled`` when it is null).
- ``"judge"``: an LLM judge with a fixed rubric (:mod:`sagerl.analysis.judge`); an answer that does not
  parse is labelled ``unlabeled`` (counted, never dropped).
- ``"auto"``: ``"recorded"`` when every record of the run has a ``strategy`` field, else ``"lexicon"``.

Measured quality of the lexicon (``tests/analysis/test_patterns.py`` prints both tables and fails if any
value drops below the one stated here). Two hand-labelled sets of short solutions in the style of math
solutions, 1-3 labels each: ``tests/analysis/labelled_solutions.jsonl`` (43 solutions; written before the
lexicon, which was then corrected on it, so these are training-set numbers) and
``labelled_solutions_heldout.jsonl`` (15 solutions written after the lexicon was frozen, never used to
change it)::

                         tuning set (43)               held-out set (15)
    pattern              precision  recall  (n)      precision  recall  (n)
    constraint_setup        0.80     1.00   (4)         1.00     0.00   (2)
    case_analysis           1.00     0.80   (5)         1.00     0.00   (1)
    contradiction           1.00     1.00   (3)         1.00     0.00   (1)
    working_backwards       1.00     1.00   (3)         1.00     1.00   (1)
    substitution            1.00     1.00   (3)         1.00     0.00   (1)
    enumeration             1.00     1.00   (6)         1.00     0.50   (2)
    verification            1.00     1.00   (6)         1.00     0.50   (2)
    modular_arithmetic      0.75     1.00   (6)         1.00     1.00   (3)
    symmetry_invariant      1.00     1.00   (3)         1.00     1.00   (1)
    induction               1.00     1.00   (3)         1.00     1.00   (1)
    construction            1.00     1.00   (3)         1.00     0.00   (1)
    bounding                1.00     1.00   (4)         1.00     1.00   (1)
    direct_computation      1.00     1.00   (8)         0.14     1.00   (1)

(Precision is 1.00 where a pattern was never predicted.) Read: the cues are precise, but their recall on
phrasings they were not written for is low ("say the speed is v", "writing t = x + 1/x", "set the center
at (0, 0)" carry no cue), so unrecognised solutions fall into ``direct_computation``. Use shares as a
lower bound per pattern and a comparison *between* runs of one model family; the judge is the better
instrument where absolute shares matter.

Shares (:func:`pattern_shares`): the share of completions using each pattern, among correct completions
(the SAGE paper's measure, e.g. proof by contradiction in 0.8% of GRPO's solutions) and among all
completions, pooled over problems (a ratio of sums), with 95% percentile bootstrap CIs that resample
problems (:mod:`sagerl.eval.passk`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.analysis.runs import EvalRun, align_runs
from sagerl.errors import ConfigError
from sagerl.eval.passk import BOOTSTRAP_SEED, bootstrap_means, percentile_ci

DIRECT = "direct_computation"
VERIFICATION = "verification"
UNLABELED = "unlabeled"

DESCRIPTIONS: dict[str, str] = {
    "constraint_setup": "defines unknowns and writes the conditions as equations",
    "case_analysis": "splits the problem into cases and treats each",
    "contradiction": "assumes the opposite and derives a contradiction",
    "working_backwards": "starts from the end state or the goal and reverses the steps",
    "substitution": "substitutes an expression or a new variable to simplify",
    "enumeration": "lists possibilities or tries values one by one (trial and error)",
    "verification": "checks the result (plugs it back in, double-checks a step)",
    "modular_arithmetic": "uses remainders, congruences, divisibility, parity or last digits",
    "symmetry_invariant": "uses a symmetry (without loss of generality) or a quantity that never changes",
    "induction": "uses induction or a recursion / recurrence",
    "construction": "places the figure in coordinates or draws auxiliary lines or points",
    "bounding": "bounds or estimates a quantity (inequalities, AM-GM, approximations)",
    DIRECT: "computes the answer directly, with none of the strategies above",
}
TAXONOMY: tuple[str, ...] = tuple(DESCRIPTIONS)
"""The pattern labels, in report order (``direct_computation`` last)."""

_VAR = r"\$?\\?[a-z](?:_\{?\w+\}?)?\$?"  # a variable, optionally in $...$ or with a subscript
_CONTRARY = (
    r"(?:for\s+(?:the\s+sake\s+of\s+)?contradiction|to\s+the\s+contrary|the\s+(?:opposite|contrary))\b"
)
_NEGATED = r"(?:that\s+)?(?:\S+\s+){1,5}(?:were|was\s+not|is\s+not|are\s+not|isn't|aren't)\b"
_TRIED = rf"(?:each|all|every|small|some|values?|{_VAR}\s*=|\d)"
Cue = str | tuple[str, str]
LEXICON: dict[str, tuple[Cue, ...]] = {
    "constraint_setup": (
        rf"\blet\s+{_VAR}\s+(?:be|denote|represent|stand\s+for)\b",
        rf"\blet\s+{_VAR}\s+and\s+{_VAR}\s+be\b",
        r"\blet\s+the\s+(?:number|amount|price|cost|length|width|height|age|speed|time|distance)\b",
        r"\bdenot(?:e|es|ed|ing)\b",
        r"\bunknowns?\b",
        r"\bset(?:ting)?\s+up\s+(?:an?\s+|the\s+)?(?:system\s+of\s+)?equations?\b",
        r"\bsystem\s+of\s+equations\b",
        r"\bwrite\s+(?:an?\s+|the\s+)?equations?\b",
        r"\bform\s+(?:an?\s+|the\s+)?equations?\b",
    ),
    "case_analysis": (
        r"\bcases?\s+(?:\d+|i{1,3}|iv|one|two|three)\b",
        ("cases", r"\b(?:two|three|four|several|both|these|the\s+following)\s+cases\b"),
        ("cases", r"\b(?:split|divide|break)\s+(?:it\s+|this\s+)?into\s+(?:\w+\s+)?cases\b"),
        r"\bin\s+(?:either|each|both|the\s+(?:first|second|other))\s+case\b",
        ("case", r"\b(?:that|this)\s+case\b"),
        r"\bcasework\b",
        rf"\bif\s+{_VAR}\s+is\s+(?:even|odd|positive|negative|zero)\b",
        rf"\bif\s+{_VAR}\s*(?:≥|≤|>=|<=|>|<|\\geq?|\\leq?)",
        r"\bif\s+it\s+is\s+\d+\b",
        r"\botherwise\b",
    ),
    "contradiction": (
        r"\bcontradict(?:s|ion|ory|ing)?\b",
        rf"\bsuppose[\s,]+{_CONTRARY}",
        rf"\bassume[\s,]+{_CONTRARY}",
        r"\babsurd(?:ity)?\b",
        rf"\bsuppose\s+{_NEGATED}",
        rf"\bassume\s+{_NEGATED}",
        r"\bsuppose\s+no\b",
    ),
    "working_backwards": (
        r"\bwork(?:s|ing|ed)?\s+backwards?\b",
        r"\bgoing\s+back(?:wards)?\b(?!\s+to\b)",
        r"\brevers(?:e|ing)\s+(?:the\s+)?(?:steps|operations|process|order)\b",
        r"\bundo(?:ing)?\s+(?:the\s+)?(?:steps|operations|each)\b",
        r"\bstart(?:ing)?\s+from\s+the\s+(?:end|answer|final|last)\b",
        r"\bbefore\s+that\b",
    ),
    "substitution": (
        r"\bsubstitut(?:e|es|ed|ing|ion)\b",
        r"\bplug(?:s|ged|ging)?\s+(?:it\s+|this\s+|that\s+|these\s+)?(?:in|into|back)\b",
        r"\breplac(?:e|es|ed|ing)\s+\S+\s+(?:with|by)\b",
        rf"\blet\s+{_VAR}\s*=",
        r"\bin\s+terms\s+of\b",
        r"\bgoing\s+back\s+to\b",
    ),
    "enumeration": (
        r"\blist(?:s|ed|ing)?\s+(?:the|all|them|out|every|each|possible)\b",
        r"\benumerat(?:e|es|ed|ing|ion)\b",
        r"\bpossibilities\s+are\b",
        r"\btrial\s+and\s+error\b",
        r"\bguess\s+and\s+check\b",
        ("try tries trying", rf"\btr(?:y|ies|ying)\s+{_TRIED}"),
        rf"\btest(?:s|ing)?\s+{_TRIED}",
        r"\bcheck(?:ing)?\s+(?:each|all|every)\b",
        r"\bgo(?:ing)?\s+through\s+(?:each|all|every)\b",
        r"\bone\s+by\s+one\b",
        r"\bwe\s+count\b",
    ),
    VERIFICATION: (
        r"\bverif(?:y|ies|ied|ying|ication)\b",
        r"\bdouble[-\s]check(?:s|ed|ing)?\b",
        r"\bsanity\s+check\b",
        r"\bcheck(?:ing)?\s*:",
        r"\blet(?:'s|\s+us|\s+me)\s+(?:double[-\s])?check\b",
        r"\bwe\s+can\s+(?:double[-\s])?check\b",
        r"\bchecks\s+out\b",
        r"\bas\s+required\b",
        r"\bwhich\s+(?:works|matches|is\s+correct)\b",
        r"\bindeed\b",
        r"\bconfirm(?:s|ed|ing)?\b",
    ),
    "modular_arithmetic": (
        r"\bmod(?:ulo)?\b",
        r"\\pmod\b",
        r"\\equiv\b",
        r"≡",
        r"\bcongruen(?:t|ce)\b",
        r"\bremainders?\b",
        r"\bresidues?\b",
        r"\blast\s+digit\b",
        r"\bunits?\s+digit\b",
        r"\bones\s+digit\b",
        r"\bdivisible\s+by\b",
        r"\bdivides\b",
        ("even odd", r"\b(?:is|are|be)\s+(?:even|odd)\b"),
        r"\bparity\b",
    ),
    "symmetry_invariant": (
        r"\bsymmetr(?:y|ic|ically)\b",
        r"\binvariant\b",
        r"\bwithout\s+loss\s+of\s+generality\b",
        r"\bwlog\b",
        r"\bnever\s+change[sd]?\b",
        r"\bdoes\s+not\s+change[sd]?\b",
        r"\bdoesn't\s+change[sd]?\b",
        r"\bremains?\s+(?:the\s+same|unchanged|constant)\b",
        r"\bconserved\b",
    ),
    "induction": (
        r"\binduct(?:ion|ive|ively)\b",
        r"\bbase\s+case\b",
        r"\brecurs(?:ion|ive|ively)\b",
        r"\brecurrence\b",
        r"\bholds\s+for\s+\$?n\s*\+\s*1\b",
        r"\btrue\s+for\s+\$?n\s*\+\s*1\b",
        r"\ba_\{?n\}?\s*=\s*a_\{?n\s*-\s*1\}?",
    ),
    "construction": (
        r"\bcoordinates?\b",
        r"\bplane\b",
        r"\bgrid\b",
        r"\baxes\b",
        r"\borigin\b",
        ("axis", r"\b[xy]-axis\b"),
        r"\bdraw(?:s|ing|n)?\b",
        r"\bconstruct(?:s|ed|ing)?\b",
        r"\bauxiliary\b",
        r"\bdrop(?:ping)?\s+(?:an?\s+|the\s+)?(?:altitude|perpendicular)\b",
        r"\bmidpoint\b",
    ),
    "bounding": (
        r"\bbound(?:s|ed|ing)?\b",
        r"\bestimat(?:e|es|ed|ing|ion)\b",
        r"\bapproximately\b",
        r"\broughly\b",
        r"\bam-gm\b",
        r"\bcauchy(?:-schwarz)?\b",
        r"\binequalit(?:y|ies)\b",
        r"\bat\s+most\b",
        r"\blies\s+between\b",
    ),
}
"""Cue regexes per pattern, matched against the lowercased text; ``direct_computation`` has no cues (it is
the label when nothing but ``verification`` fires). A cue is a regex, or ``(triggers, regex)`` where
``triggers`` lists the word prefixes one of which every match contains (for speed, see
:func:`lexicon_labels`); a plain regex starting with ``\\b`` and a word takes that word as its trigger."""


@dataclass(frozen=True)
class _CompiledCue:
    label: str
    regex: re.Pattern[str]  # without its leading \b (so the regex engine can search for its literal prefix)
    word_start: bool  # the cue began with \b: a match must start at a word boundary
    triggers: tuple[str, ...]  # word prefixes; empty: always searched


_LEADING_WORD = re.compile(r"^\\b([a-z]+)(.?)")


def _leading_word(source: str) -> str:
    """The letters a plain cue's matches must start with: ``\\bcases?`` -> ``case``; "" when none."""
    m = _LEADING_WORD.match(source)
    if not m:
        return ""
    word, after = m.groups()
    return word[:-1] if after in ("?", "*", "{") else word


def _compile_lexicon(lexicon: Mapping[str, tuple[Cue, ...]]) -> list[_CompiledCue]:
    cues = []
    for label, items in lexicon.items():
        for item in items:
            triggers, source = item if isinstance(item, tuple) else ("", item)
            if not triggers:
                triggers = _leading_word(source)
            word_start = source.startswith(r"\b")
            body = source[2:] if word_start else source
            cues.append(_CompiledCue(label, re.compile(body), word_start, tuple(triggers.split())))
    return cues


_CUES = _compile_lexicon(LEXICON)
_ALWAYS = tuple(i for i, cue in enumerate(_CUES) if not cue.triggers)
_TRIGGERS = tuple((i, tuple(t.encode() for t in cue.triggers)) for i, cue in enumerate(_CUES) if cue.triggers)
_LETTERS_ONLY = bytes(
    c if 97 <= c <= 122 else 32 for c in range(256)
)  # bytes.translate: a-z kept, rest -> space
_WORD_CUES: dict[
    bytes, tuple[int, ...]
] = {}  # words seen -> the cues they trigger (a cache of the vocabulary)
_TRIGGERING: set[bytes] = set()  # the words of _WORD_CUES that trigger some cue
_WORD_CACHE_LIMIT = 1_000_000
CLASSIFIERS = ("auto", "lexicon", "recorded", "judge")

Labels = tuple[str, ...]
Labeller = Callable[[Sequence[str]], list[Labels]]
"""A judge: texts -> one tuple of labels per text (see :class:`sagerl.analysis.judge.Judge`)."""


def _cues_of(word: bytes) -> tuple[int, ...]:
    found = tuple(i for i, prefixes in _TRIGGERS if word.startswith(prefixes))
    if len(_WORD_CUES) < _WORD_CACHE_LIMIT:
        _WORD_CUES[word] = found
        if found:
            _TRIGGERING.add(word)
    return found


def _cue_matches(cue: _CompiledCue, text: str) -> bool:
    pos = 0
    while (m := cue.regex.search(text, pos)) is not None:
        start = m.start()
        if not cue.word_start or start == 0 or not (text[start - 1].isalnum() or text[start - 1] == "_"):
            return True
        pos = start + 1
    return False


def lexicon_labels(text: str) -> Labels:
    """The patterns whose cues occur in ``text``, in :data:`TAXONOMY` order; ``("direct_computation",)``
    (plus ``verification`` if it fires) when no other pattern does. Never empty.

    Speed: the lowercased text is split once into its words (maximal runs of a-z); only the cues that one
    of these words triggers are searched. Equivalent to searching every cue (tested against
    :func:`lexicon_labels_slow`), and about 20x faster.
    """
    low = text.lower()
    words = set(low.encode("utf-8").translate(_LETTERS_ONLY).split())
    candidates = set(_ALWAYS)
    for word in words.difference(_WORD_CUES):
        candidates.update(_cues_of(word))
    for word in words.intersection(_TRIGGERING):
        candidates.update(_WORD_CUES[word])
    found: set[str] = set()
    for i in candidates:
        cue = _CUES[i]
        if cue.label not in found and _cue_matches(cue, low):
            found.add(cue.label)
    if found <= {VERIFICATION}:
        found.add(DIRECT)
    return tuple(label for label in TAXONOMY if label in found)


def lexicon_labels_slow(text: str) -> Labels:
    """:func:`lexicon_labels` without the word triggers: every cue's full regex searched (the reference
    the fast path is tested against)."""
    low = text.lower()
    found = {
        label
        for label, items in LEXICON.items()
        if any(re.search(item[1] if isinstance(item, tuple) else item, low) for item in items)
    }
    if found <= {VERIFICATION}:
        found.add(DIRECT)
    return tuple(label for label in TAXONOMY if label in found)


def resolve_classifier(run: EvalRun, classifier: str) -> str:
    """The classifier ``"auto"`` stands for on ``run`` (``"recorded"`` when every record has a
    ``strategy``, else ``"lexicon"``); other names are returned unchanged.

    Raises:
        ConfigError: an unknown classifier name, or ``"recorded"`` on a run whose records lack ``strategy``.
    """
    if classifier not in CLASSIFIERS:
        raise ConfigError(f"unknown classifier {classifier!r} (choose {', '.join(CLASSIFIERS)})")
    if classifier in ("auto", "recorded"):
        every = all(
            "strategy" in r and (r["strategy"] is None or isinstance(r["strategy"], str))
            for probs in run.records.values()
            for recs in probs.values()
            for r in recs
        )
        if classifier == "auto":
            return "recorded" if every else "lexicon"
        if not every:
            raise ConfigError(
                f"{run.path}: classifier 'recorded' needs a 'strategy' field in every sample record"
            )
    return classifier


def run_labels(
    run: EvalRun, classifier: str = "auto", *, judge: Labeller | None = None, correct_only: bool = False
) -> dict[str, dict[str, list[Labels | None]]]:
    """Pattern labels of every record of ``run``: dataset -> problem id -> one tuple per sample.

    Labels are cached on the run per classifier, and each distinct text is labelled once. With
    ``correct_only``, incorrect records get ``None`` (not labelled; for an expensive judge).

    Raises:
        ConfigError: unknown classifier, ``"recorded"`` without strategies, ``"judge"`` without a judge.
    """
    name = resolve_classifier(run, classifier)
    if name == "judge" and judge is None:
        raise ConfigError("classifier 'judge' needs a judge model (--judge MODEL)")
    cache = run.labels_cache.setdefault(name, {})  # text -> labels
    if name == "recorded":
        return {
            ds: {pid: [(r["strategy"] or UNLABELED,) for r in recs] for pid, recs in probs.items()}
            for ds, probs in run.records.items()
        }
    wanted = [
        r["text"]
        for probs in run.records.values()
        for recs in probs.values()
        for r in recs
        if (r["correct"] or not correct_only) and r.get("text", "") not in cache
    ]
    todo = list(dict.fromkeys(wanted))
    if todo:
        found = judge(todo) if name == "judge" else [lexicon_labels(t) for t in todo]  # type: ignore[misc]
        cache.update(zip(todo, found, strict=True))
    return {
        ds: {
            pid: [cache[r.get("text", "")] if (r["correct"] or not correct_only) else None for r in recs]
            for pid, recs in probs.items()
        }
        for ds, probs in run.records.items()
    }


def shown_labels(shares: Mapping[str, Mapping[str, Any]], population: str = "correct") -> list[str]:
    """The labels some run of ``shares`` (run -> :func:`pattern_shares` output) uses at least once in
    ``population``, in :data:`TAXONOMY` order (for tables and figures; the JSON keeps every label)."""
    used = {
        lab for s in shares.values() for lab, entry in s[population]["shares"].items() if entry["count"] > 0
    }
    return _label_order(used)


def _label_order(observed: set[str]) -> list[str]:
    known = [t for t in (*TAXONOMY, UNLABELED) if t in observed]
    return known + sorted(observed - set(known))


def _count_matrices(
    run: EvalRun, labels: dict[str, dict[str, list[Labels | None]]], order: list[str], among: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per problem: counts of each label (P, L) and the number of completions counted (P,)."""
    col = {lab: j for j, lab in enumerate(order)}
    rows, denom = [], []
    for ds in run.datasets:
        for pid in run.problem_ids[ds]:
            counts = np.zeros(len(order))
            total = 0
            for rec, labs in zip(run.records[ds][pid], labels[ds][pid], strict=True):
                if (among == "correct" and not rec["correct"]) or labs is None:
                    continue
                total += 1
                for lab in labs:
                    counts[col[lab]] += 1
            rows.append(counts)
            denom.append(total)
    return np.array(rows).reshape(-1, len(order)), np.array(denom, dtype=np.float64)


def ratio_ci(numerators: np.ndarray, denominators: np.ndarray, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """95% percentile bootstrap CI of sum(numerators) / sum(denominators), resampling problems.

    Args:
        numerators: (P, L) per-problem counts; denominators: (P,) per-problem totals.

    Returns:
        (L, 2) [low, high]; NaN where a replicate's denominator is 0 in more than half the replicates.
    """
    table = np.column_stack([numerators, denominators])
    reps = bootstrap_means(table, rng=np.random.default_rng(seed))  # (B, L + 1), one set of problem draws
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = reps[:, :-1] / reps[:, -1:]
    ratios = ratios[np.isfinite(ratios).all(axis=1)]
    if len(ratios) < len(reps) / 2:
        return np.full((numerators.shape[1], 2), np.nan)
    return percentile_ci(ratios)


def pattern_shares(
    run: EvalRun,
    classifier: str = "auto",
    *,
    judge: Labeller | None = None,
    among: Sequence[str] = ("correct", "all"),
) -> dict[str, Any]:
    """Share of completions that use each pattern, with 95% bootstrap CIs over problems.

    The share of label ℓ among correct completions is (number of correct completions labelled ℓ) /
    (number of correct completions), pooled over all problems of all datasets; ``"all"`` counts every
    completion. A completion may carry several labels, so shares need not sum to 1.

    Args:
        run: the eval run.
        classifier: ``"auto"``, ``"lexicon"``, ``"recorded"`` or ``"judge"`` (see the module docstring).
        judge: the labeller for ``"judge"`` (:class:`sagerl.analysis.judge.Judge`).
        among: which populations to report: ``"correct"`` and/or ``"all"``. With only ``"correct"``, a
            judge labels only correct completions.

    Returns:
        ``{"classifier": name, "labels": [...], "correct": {...}, "all": {...}}`` where each population is
        ``{"num_completions": N, "num_problems": P, "shares": {label: {"share", "ci": [lo, hi],
        "count"}}}``.

    Raises:
        ConfigError: unknown classifier or population, or see :func:`run_labels`.
    """
    bad = [a for a in among if a not in ("correct", "all")]
    if bad or not among:
        raise ConfigError(f"among must name 'correct' and/or 'all', got {list(among)}")
    name = resolve_classifier(run, classifier)
    labels = run_labels(run, name, judge=judge, correct_only="all" not in among)
    observed = {
        lab for probs in labels.values() for recs in probs.values() for labs in recs for lab in labs or ()
    }
    order = _label_order(observed)
    out: dict[str, Any] = {"classifier": name, "labels": order}
    for pop in among:
        counts, denom = _count_matrices(run, labels, order, pop)
        total = denom.sum()
        ci = ratio_ci(counts, denom) if total > 0 else np.full((len(order), 2), np.nan)
        out[pop] = {
            "num_completions": int(total),
            "num_problems": int(counts.shape[0]),
            "shares": {
                lab: {
                    "share": float(counts[:, j].sum() / total) if total else float("nan"),
                    "ci": [float(ci[j, 0]), float(ci[j, 1])],
                    "count": int(counts[:, j].sum()),
                }
                for j, lab in enumerate(order)
            },
        }
    return out


def compare_shares(
    runs: Sequence[EvalRun],
    classifier: str = "auto",
    *,
    judge: Labeller | None = None,
    among: str = "correct",
    intersect: bool = False,
) -> dict[str, Any]:
    """Share differences between runs: share(run) − share(first run) per pattern, with a paired bootstrap
    95% CI (the same problem draws for both runs).

    Returns:
        ``{"reference": label, "among": among, "labels": [...], "differences": {run label: {pattern:
        {"difference", "ci": [lo, hi]}}}, "dropped_problems": {...}}``.

    Raises:
        SagerlError: the runs' problems or n differ and ``intersect`` is False (see
            :func:`sagerl.analysis.runs.align_runs`).
    """
    aligned, note = align_runs(list(runs), intersect=intersect)
    all_labels = [run_labels(r, classifier, judge=judge, correct_only=among == "correct") for r in aligned]
    observed = {
        lab
        for labels in all_labels
        for probs in labels.values()
        for recs in probs.values()
        for labs in recs
        for lab in labs or ()
    }
    order = _label_order(observed)
    ref_counts, ref_denom = _count_matrices(aligned[0], all_labels[0], order, among)
    diffs: dict[str, Any] = {}
    for run, labels in zip(aligned[1:], all_labels[1:], strict=True):
        counts, denom = _count_matrices(run, labels, order, among)
        table = np.column_stack([counts, denom, ref_counts, ref_denom])
        reps = bootstrap_means(table, rng=np.random.default_rng(BOOTSTRAP_SEED))
        k = len(order)
        with np.errstate(invalid="ignore", divide="ignore"):
            rep_diff = reps[:, :k] / reps[:, k : k + 1] - reps[:, k + 1 : 2 * k + 1] / reps[:, -1:]
            point = counts.sum(0) / denom.sum() - ref_counts.sum(0) / ref_denom.sum()
        rep_diff = rep_diff[np.isfinite(rep_diff).all(axis=1)]
        ci = percentile_ci(rep_diff) if len(rep_diff) else np.full((k, 2), np.nan)
        diffs[run.label] = {
            lab: {"difference": float(point[j]), "ci": [float(ci[j, 0]), float(ci[j, 1])]}
            for j, lab in enumerate(order)
        }
    return {
        "reference": aligned[0].label,
        "among": among,
        "labels": order,
        "differences": diffs,
        "dropped_problems": note["dropped_problems"],
    }


def precision_recall(
    predicted: Sequence[Sequence[str]], expected: Sequence[Sequence[str]], labels: Sequence[str] = TAXONOMY
) -> dict[str, dict[str, float]]:
    """Per-label precision and recall of multi-label predictions against expected labels.

    Returns:
        label -> ``{"precision", "recall", "support", "predicted"}``; precision is 1.0 when the label was
        never predicted, recall 1.0 when it never occurs (no error of that kind is possible).
    """
    table: dict[str, dict[str, float]] = {}
    for lab in labels:
        tp = sum(lab in p and lab in e for p, e in zip(predicted, expected, strict=True))
        n_pred = sum(lab in p for p in predicted)
        n_true = sum(lab in e for e in expected)
        table[lab] = {
            "precision": tp / n_pred if n_pred else 1.0,
            "recall": tp / n_true if n_true else 1.0,
            "support": n_true,
            "predicted": n_pred,
        }
    return table


def shares_table_rows(
    shares: Mapping[str, Any], population: str = "correct"
) -> list[tuple[str, float, list]]:
    """(label, share, ci) rows of :func:`pattern_shares` output for one population, in label order."""
    pop = shares[population]["shares"]
    return [(lab, pop[lab]["share"], pop[lab]["ci"]) for lab in shares["labels"]]


def plot_pattern_shares(
    shares: Mapping[str, Mapping[str, Any]], path: str | Path, population: str = "correct"
) -> Path:
    """Grouped bars: per pattern, each run's share (%) with its 95% CI, for one population."""
    from sagerl.eval.plots import _pyplot, _save

    plt = _pyplot()
    order = shown_labels(shares, population)
    width = 0.8 / max(1, len(shares))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.7 * len(order) * max(1, len(shares)) ** 0.5), 4.2))
    x = np.arange(len(order))
    for i, (label, s) in enumerate(shares.items()):
        pop = s[population]["shares"]
        vals = np.array([100 * pop[lab]["share"] if lab in pop else 0.0 for lab in order])
        lo = np.array([100 * pop[lab]["ci"][0] if lab in pop else 0.0 for lab in order])
        hi = np.array([100 * pop[lab]["ci"][1] if lab in pop else 0.0 for lab in order])
        err = np.nan_to_num(np.vstack([vals - lo, hi - vals]).clip(min=0))
        ax.bar(x + (i - (len(shares) - 1) / 2) * width, vals, width, yerr=err, capsize=2, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels([lab.replace("_", " ") for lab in order], rotation=40, ha="right", fontsize=8)
    ax.set_ylabel(f"share of {population} completions (%)")
    ax.set_title(f"reasoning patterns ({population} completions, 95% CI over problems)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def analyze_patterns(
    runs: Sequence[EvalRun],
    out: str | Path,
    *,
    classifier: str = "auto",
    judge: Labeller | None = None,
    among: Sequence[str] = ("correct", "all"),
    intersect: bool = False,
) -> dict[str, Any]:
    """Pattern shares of every run, the differences to the first run (when there are several; paired
    CIs, so the runs must share their problems unless ``intersect``), and ``patterns.png`` in ``out``.

    Returns:
        ``{"runs", "paths", "shares": {run: pattern_shares}, "compare": compare_shares or None, "figure"}``
        (plus ``"judge": {"failures", "unparsed"}`` with a judge).

    Raises:
        SagerlError, ConfigError: see :func:`pattern_shares` and :func:`compare_shares`.
    """
    shares = {r.label: pattern_shares(r, classifier, judge=judge, among=among) for r in runs}
    population = "correct" if "correct" in among else "all"
    result: dict[str, Any] = {
        "runs": [r.label for r in runs],
        "paths": {r.label: str(r.path) for r in runs},
        "shares": shares,
        "compare": (
            compare_shares(runs, classifier, judge=judge, among=population, intersect=intersect)
            if len(runs) > 1
            else None
        ),
    }
    figure = Path(out) / "patterns.png"
    plot_pattern_shares(shares, figure, population)
    result["figure"] = figure.name
    if judge is not None and hasattr(judge, "failures"):
        result["judge"] = {"failures": judge.failures, "unparsed": judge.unparsed}
    return result
