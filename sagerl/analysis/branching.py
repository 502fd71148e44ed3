"""Branching tokens: re-score an eval run's completions under a model and see where it branches.

Re-scoring (:func:`rescore`) runs one batched forward pass per batch of completions (teacher forcing, no
generation) and computes, at every completion token t, the entropy of the model's next-token distribution

    H_t = −Σ_v p_v log p_v,   p = softmax(z_t / T)   (nats, over the full vocabulary)

with T the eval run's sampling temperature (1 when it sampled greedily), as the trainer computes the
entropy the branch guide reads. The guide value is :func:`sagerl.objective.branch_guide`,
q_t = clamp(1 + γ·(H_t − τ)₊, q_min, q_max), with γ, τ, q_min, q_max from a preset (or a training run's
``config.yaml``), each overridable (:func:`guide_settings`). Source: SAGE (arXiv 2605.18864), branch guide.

Token ids: the prompt is rendered as the eval did (:func:`sagerl.tasks.render_prompt` with the eval's
few-shot count, tokenised with the tokenizer's own special tokens when it has no chat template) and the
completion text is tokenised after it; an end-of-sequence token is appended when the completion stopped
on one (``finish_reason == "stop"``). The eval stored decoded text, not the sampled ids, so re-tokenising
can differ from the sampled ids at a few tokens (a word the model spelled with two tokens becomes the
tokenizer's one canonical token); the entropies are then those of the canonical tokenisation.

Reports (:func:`branching_stats`): the share of tokens with H_t > τ (the branching points, where the guide
raises q above 1), the H_t histogram of correct and incorrect completions, the tokens most often at
branching points, and mean H_t, mean q and the share above τ for correct vs incorrect completions.
:func:`write_branching_html` writes a self-contained page (inline CSS, no script, no network) with each
token shaded by H_t and its H_t and q in a tooltip.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.analysis.runs import EvalRun
from sagerl.atomic_files import atomic_write_text
from sagerl.errors import ConfigError, SagerlError
from sagerl.eval.samplers import cache_argument, output_cache

GUIDE_KEYS = ("gamma", "tau", "q_min", "q_max")
HIST_BINS = 40


@dataclass
class Rescored:
    """One re-scored completion.

    Attributes:
        dataset, problem_id, sample_index, correct: the sample's identity and grade.
        token_ids: the T completion token ids (end-of-sequence token included when it stopped on one).
        entropy: (T,) float32, H_t in nats.
        q: (T,) float32, the branch guide's q_t.
    """

    dataset: str
    problem_id: str
    sample_index: int
    correct: bool
    token_ids: list[int]
    entropy: np.ndarray
    q: np.ndarray


def guide_settings(preset: str = "grpo+branch", **overrides: float | None) -> dict[str, Any]:
    """γ, τ, q_min, q_max of the branch guide: from a preset name, or from a training run folder's
    ``config.yaml`` (its resolved trainer values, else its preset's), then the non-None ``overrides``.

    Returns:
        ``{"gamma", "tau", "q_min", "q_max", "source"}``.

    Raises:
        ConfigError: unknown preset, an unreadable ``config.yaml``, or an unknown override key.
    """
    import yaml

    from sagerl.train.presets import load_preset

    unknown = set(overrides) - set(GUIDE_KEYS)
    if unknown:
        raise ConfigError(f"unknown guide setting(s) {sorted(unknown)} (choose {', '.join(GUIDE_KEYS)})")
    folder = Path(preset)
    if (folder / "config.yaml").is_file():
        try:
            config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{folder / 'config.yaml'}: not valid YAML ({exc})") from exc
        values = load_preset(str(config.get("preset", "grpo+branch")))
        values.update(config.get("trainer", {}))
        source = str(folder / "config.yaml")
    else:
        values = load_preset(preset)
        source = f"preset {preset}"
    settings = {k: float(values[k]) for k in GUIDE_KEYS}
    settings.update({k: float(v) for k, v in overrides.items() if v is not None})
    settings["source"] = source
    return settings


def _problems(
    run: EvalRun, data_dir: str | Path | None, dataset_files: Mapping[str, str] | None
) -> dict[str, dict[str, Any]]:
    """dataset -> problem id -> Problem, for the run's datasets (named sets or the given files)."""
    from sagerl.tasks import load_problems

    found: dict[str, dict[str, Any]] = {}
    for ds in run.datasets:
        spec = (dataset_files or {}).get(ds, ds)
        try:
            problems = load_problems(spec, data_dir=data_dir)
        except SagerlError as exc:
            raise SagerlError(
                f"cannot load the problems of dataset {ds!r} to rebuild the prompts ({exc}); "
                f"give its file with --dataset-file {ds}=PATH"
            ) from exc
        by_id = {str(p.id): p for p in problems}
        missing = [pid for pid in run.problem_ids[ds] if pid not in by_id]
        if missing:
            raise SagerlError(f"dataset {spec!r} has no problem {missing[0]!r} of run {run.path}")
        found[ds] = by_id
    return found


def _entropy(logits, temperature: float):
    """(..., V) logits -> (...) entropy in nats of p = softmax(logits / temperature), computed in float32 as
    H = log Z − Σ_v p_v z_v with z shifted by its max (stable; one exp pass over the vocabulary)."""
    import torch

    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    z = z - z.amax(dim=-1, keepdim=True)
    e = torch.exp(z)
    total = e.sum(dim=-1)
    return torch.log(total) - (e * z).sum(dim=-1) / total


_HEAD_CHUNK = 32
"""Positions per output-embedding product: a chunk's logits (chunk x vocabulary floats) stay in the CPU
cache for the entropy passes, which is ~3.5x faster than 256 positions at a time."""


def _call(model, **kwargs):
    """A forward pass that keeps the logits of the last position only, when the model supports it."""
    try:
        return model(**kwargs, logits_to_keep=1)
    except TypeError:  # models without logits_to_keep
        return model(**kwargs)


def completion_entropies(
    model: Any,
    prompts: Sequence[Sequence[int]],
    rows: Sequence[tuple[int, Sequence[int]]],
    temperature: float,
    pad_id: int,
) -> list:
    """H_t at every completion token of a batch, in one prefill and one batched forward pass.

    Args:
        model: a causal LM. prompts: the distinct prompts of the batch (token ids); each is prefilled once.
        rows: (prompt index, completion token ids), one per completion; completions are non-empty.
        temperature: softmax temperature. pad_id: the padding token id.

    Prompts are LEFT padded and prefilled together; the prefill's last-position logits give H at each
    completion's first token. The cache is then expanded to one row per completion (the samples of a
    problem share their prompt's prefill) and the completions, RIGHT padded, go through one forward pass;
    the final hidden states times the output embeddings give the logits at each completion's own
    positions only (no padding, at most ``_HEAD_CHUNK`` positions at a time).

    Returns:
        one (T_i,) float32 CPU tensor per row, T_i its completion length.

    Raises:
        SagerlError: the model transforms its logits after the output embeddings (e.g. soft-capping), which
            this fast path cannot reproduce (checked on every batch).
    """
    import torch

    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp_(min=0)
    out: list = []
    with torch.inference_mode():
        pre = _call(
            model,
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=True,
        )
        first = _entropy(pre.logits[:, -1], temperature).cpu()  # (S,): H at each completion's first token
        out = [first[slot : slot + 1] for slot, _ in rows]
        steps = max(len(c) for _, c in rows) - 1  # inputs: every completion token but the last
        if steps == 0:
            return out
        expand = torch.tensor([slot for slot, _ in rows], device=device)
        cache = output_cache(pre)
        cache.batch_select_indices(expand)
        comp = torch.full((len(rows), steps), pad_id, dtype=torch.long)
        comp_mask = torch.zeros((len(rows), steps), dtype=torch.long)
        for r, (_, c) in enumerate(rows):
            comp[r, : len(c) - 1] = torch.tensor(list(c[:-1]), dtype=torch.long)
            comp_mask[r, : len(c) - 1] = 1
        full_mask = torch.cat([mask.to(device).index_select(0, expand), comp_mask.to(device)], dim=-1)
        comp_pos = pos.to(device).index_select(0, expand)[:, -1:] + 1 + torch.arange(steps, device=device)
        res = _call(
            model,
            input_ids=comp.to(device),
            attention_mask=full_mask,
            position_ids=comp_pos,
            output_hidden_states=True,
            **{cache_argument(model): cache},
        )
        hidden = res.hidden_states[-1]  # (B, steps, H), after the final norm
        head = model.get_output_embeddings()
        if not torch.allclose(head(hidden[:, -1]).float(), res.logits[:, -1].float(), rtol=1e-3, atol=1e-3):
            raise SagerlError(
                "this model transforms its logits after the output embeddings (logit scaling or soft-capping); "
                "branching re-scoring does not support it"
            )
        for r, (_, c) in enumerate(rows):
            h = hidden[r, : len(c) - 1]
            parts = [
                _entropy(head(h[i : i + _HEAD_CHUNK]), temperature).cpu()
                for i in range(0, len(h), _HEAD_CHUNK)
            ]
            out[r] = torch.cat([out[r], *parts])
    return out


def rescore(
    run: EvalRun,
    model: Any,
    tokenizer: Any,
    *,
    guide: Mapping[str, float],
    temperature: float | None = None,
    batch_size: int = 8,
    limit: int | None = None,
    data_dir: str | Path | None = None,
    dataset_files: Mapping[str, str] | None = None,
) -> list[Rescored]:
    """Per-token entropy H_t and branch-guide q_t of a run's completions under ``model``.

    Completions are processed in batches of ``batch_size`` (:func:`completion_entropies`): the samples of
    one problem stay together so that they share one prefill of their prompt, and problems are taken in
    order of prompt length to limit padding.

    Args:
        run: the eval run.
        model: a loaded causal LM (``sagerl.models.load_model``). tokenizer: its tokenizer.
        guide: ``{"gamma", "tau", "q_min", "q_max"}`` (:func:`guide_settings`).
        temperature: softmax temperature; default the eval's (1 when it was greedy).
        batch_size: completions per forward pass.
        limit: only the first ``limit`` problems of each dataset.
        data_dir, dataset_files: where the problems are (named sets; or dataset name -> JSONL path).

    Returns:
        the re-scored completions in the run's order (empty completions, with no token at all, left out).

    Raises:
        SagerlError: a dataset's problems cannot be loaded. ConfigError: batch_size < 1.
    """
    import torch

    from sagerl.objective import branch_guide
    from sagerl.tasks import default_few_shot, default_prompt_format, render_prompt

    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    if temperature is None:
        temperature = float(run.settings.get("temperature") or 1.0)
    if temperature <= 0:
        temperature = 1.0
    problems = _problems(run, data_dir, dataset_files)
    add_special = not getattr(tokenizer, "chat_template", None)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    prompts: list[list[int]] = []  # one per problem
    items: list[tuple[dict[str, Any], int, list[int]]] = []  # (record, prompt index, completion ids)
    for ds in run.datasets:
        few = run.few_shot.get(ds)
        if few is None:
            few = run.settings.get("few_shot")
        if few is None:
            few = default_few_shot(ds)
        for pid in run.problem_ids[ds][:limit]:
            p = problems[ds][pid]
            text = render_prompt(
                tokenizer, p, few_shot=few, kind=p.kind, prompt_format=default_prompt_format(ds)
            )
            prompts.append(list(tokenizer(text, add_special_tokens=add_special)["input_ids"]))
            for rec in run.records[ds][pid]:
                comp = list(tokenizer(rec.get("text", ""), add_special_tokens=False)["input_ids"])
                if rec.get("finish_reason") == "stop" and eos is not None:
                    comp.append(eos)
                if comp:
                    items.append((rec, len(prompts) - 1, comp))
    order = sorted(
        range(len(items)), key=lambda i: (len(prompts[items[i][1]]), items[i][1], len(items[i][2]))
    )
    results: list[Rescored | None] = [None] * len(items)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        slots: dict[int, int] = {}
        rows = [(slots.setdefault(items[i][1], len(slots)), items[i][2]) for i in idx]
        batch_prompts = [prompts[k] for k in slots]
        ents = completion_entropies(model, batch_prompts, rows, temperature, pad)
        width = max(len(e) for e in ents)
        h = torch.zeros((len(idx), width))
        m = torch.zeros((len(idx), width), dtype=torch.bool)
        for row, e in enumerate(ents):
            h[row, : len(e)] = e
            m[row, : len(e)] = True
        q = branch_guide(h, m, guide["gamma"], guide["tau"], guide["q_min"], guide["q_max"])
        for row, i in enumerate(idx):
            rec, _, comp = items[i]
            t = len(comp)
            results[i] = Rescored(
                str(rec["dataset"]),
                str(rec["problem_id"]),
                int(rec["sample_index"]),
                bool(rec["correct"]),
                comp,
                h[row, :t].numpy().astype(np.float32),
                q[row, :t].numpy().astype(np.float32),
            )
    return [r for r in results if r is not None]


def _group_stats(items: Sequence[Rescored], tau: float) -> dict[str, Any]:
    if not items:
        return {"completions": 0, "tokens": 0, "mean_entropy": None, "mean_q": None, "share_above_tau": None}
    h = np.concatenate([r.entropy for r in items])
    q = np.concatenate([r.q for r in items])
    return {
        "completions": len(items),
        "tokens": int(h.size),
        "mean_entropy": float(h.mean()),
        "mean_q": float(q.mean()),
        "share_above_tau": float((h > tau).mean()),
        "mean_completion_share_above_tau": float(np.mean([(r.entropy > tau).mean() for r in items])),
    }


def branching_stats(
    rescored: Sequence[Rescored], tokenizer: Any, *, tau: float, top: int = 20
) -> dict[str, Any]:
    """Summary of re-scored completions at threshold τ (nats).

    Returns:
        ``{"tau", "tokens", "share_above_tau", "correct": group, "incorrect": group, "all": group,
        "histogram": {"edges": [...], "correct": [...], "incorrect": [...]}, "top_branching_tokens":
        [{"token", "count", "share_of_branching_points", "branching_rate"}]}``; a group has
        ``completions``, ``tokens``, ``mean_entropy`` (token mean, nats), ``mean_q``,
        ``share_above_tau`` (token share) and ``mean_completion_share_above_tau``. ``branching_rate`` is
        the share of that token's occurrences that are branching points.

    Raises:
        SagerlError: nothing to summarise.
    """
    if not rescored:
        raise SagerlError("no completion to analyse (every completion was empty?)")
    h_all = np.concatenate([r.entropy for r in rescored])
    edges = np.linspace(0.0, max(float(h_all.max()), tau) * 1.0001, HIST_BINS + 1)
    groups = {
        "correct": [r for r in rescored if r.correct],
        "incorrect": [r for r in rescored if not r.correct],
    }
    hist = {
        name: (
            np.histogram(np.concatenate([r.entropy for r in items]), bins=edges)[0]
            if items
            else np.zeros(HIST_BINS)
        )
        for name, items in groups.items()
    }
    at_branch: Counter[int] = Counter()
    seen: Counter[int] = Counter()
    for r in rescored:
        ids = np.asarray(r.token_ids)
        seen.update(ids.tolist())
        at_branch.update(ids[r.entropy > tau].tolist())
    total_branch = sum(at_branch.values())
    top_tokens = [
        {
            "token": tokenizer.decode([tok]),
            "token_id": int(tok),
            "count": int(count),
            "share_of_branching_points": count / total_branch,
            "branching_rate": count / seen[tok],
        }
        for tok, count in at_branch.most_common(top)
    ]
    return {
        "tau": tau,
        "tokens": int(h_all.size),
        "share_above_tau": float((h_all > tau).mean()),
        "all": _group_stats(rescored, tau),
        "correct": _group_stats(groups["correct"], tau),
        "incorrect": _group_stats(groups["incorrect"], tau),
        "histogram": {"edges": edges.tolist(), **{k: v.astype(int).tolist() for k, v in hist.items()}},
        "top_branching_tokens": top_tokens,
    }


def plot_entropy_histogram(stats: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """The H_t histogram of correct and incorrect completions (token shares), with τ marked."""
    from sagerl.eval.plots import _pyplot, _save

    plt = _pyplot()
    edges = np.asarray(stats["histogram"]["edges"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, color in (("correct", "tab:green"), ("incorrect", "tab:red")):
        counts = np.asarray(stats["histogram"][name], dtype=float)
        if counts.sum() > 0:
            ax.stairs(counts / counts.sum(), edges, label=f"{name} ({int(counts.sum())} tokens)", color=color)
    ax.axvline(stats["tau"], color="black", linestyle="--", linewidth=1, label=f"τ = {stats['tau']:g}")
    ax.set_xlabel("token entropy H_t (nats)")
    ax.set_ylabel("share of tokens")
    ax.set_yscale("log")
    ax.set_title(title or "H_t of the completion tokens")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def _pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text each token adds (incremental decoding, so multi-byte characters split over tokens stay
    whole: the bytes of an unfinished character go to the token that completes it)."""
    out, prev = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=False)
        if text.endswith("\ufffd") and i + 1 < len(ids):
            out.append("")
            continue
        out.append(text[len(prev) :])
        prev = text
    return out


_PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 60em; color: #111; }
.completion { font-family: ui-monospace, monospace; white-space: pre-wrap; line-height: 1.7;
  border: 1px solid #ccc; padding: 0.8em; margin: 0.5em 0 1.5em; }
.tok { border-radius: 2px; }
.branch { border-bottom: 2px solid #000; }
.legend span { padding: 0 0.6em; }
"""


def write_branching_html(
    rescored: Sequence[Rescored],
    tokenizer: Any,
    path: str | Path,
    *,
    tau: float,
    per_group: int = 4,
    title: str = "Branching tokens",
) -> Path:
    """A self-contained HTML page (inline CSS, no script, no external resource) of up to ``per_group``
    correct and ``per_group`` incorrect completions: each token's background is shaded by H_t (white at
    0, full orange at 2τ and above), tokens above τ are underlined, and hovering shows H_t and q."""
    chosen = [r for r in rescored if r.correct][:per_group] + [r for r in rescored if not r.correct][
        :per_group
    ]
    scale = max(2.0 * tau, 1e-6)

    def shade(h: float) -> str:
        return f"rgba(255, 120, 0, {min(h / scale, 1.0) * 0.9:.3f})"

    blocks = []
    for r in chosen:
        spans = []
        for piece, h, q in zip(_pieces(tokenizer, r.token_ids), r.entropy, r.q, strict=True):
            cls = "tok branch" if h > tau else "tok"
            spans.append(
                f'<span class="{cls}" style="background:{shade(float(h))}" '
                f'title="H={float(h):.3f} nats, q={float(q):.3f}">{html.escape(piece)}</span>'
            )
        head = html.escape(
            f"{r.dataset} / {r.problem_id} / sample {r.sample_index}: "
            f"{'correct' if r.correct else 'incorrect'}, {len(r.token_ids)} tokens, "
            f"{int((r.entropy > tau).sum())} above τ"
        )
        blocks.append(f'<h3>{head}</h3>\n<div class="completion">{"".join(spans)}</div>')
    legend = "".join(
        f'<span style="background:{shade(h)}">H = {h:.2f}</span>' for h in np.linspace(0, scale, 5)
    )
    page = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_PAGE_CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>Each token is shaded by the model's entropy H_t (nats) at that "
        f"position; underlined tokens have H_t &gt; τ = {tau:g} (branching points). Hover a token for "
        f'H_t and the branch guide\'s q.</p>\n<p class="legend">{legend}</p>\n'
        + "\n".join(blocks)
        + "\n</body></html>\n"
    )
    atomic_write_text(path, page)
    return Path(path)


def analyze_branching(
    run: EvalRun,
    model: str | None,
    out: str | Path,
    *,
    preset: str = "grpo+branch",
    gamma: float | None = None,
    tau: float | None = None,
    q_min: float | None = None,
    q_max: float | None = None,
    batch_size: int = 8,
    limit: int | None = None,
    data_dir: str | Path | None = None,
    dataset_files: Mapping[str, str] | None = None,
    prefix: str = "branching",
    model_obj: Any = None,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """Re-score ``run`` under ``model`` and write ``<prefix>_hist.png`` and ``<prefix>.html`` into ``out``.

    Returns:
        :func:`branching_stats` plus ``{"run", "model", "guide", "temperature", "files"}``.

    Raises:
        ModelLoadError, SagerlError, ConfigError: see :func:`rescore` and :func:`guide_settings`.
    """
    from sagerl.models import load_model, load_tokenizer

    guide = guide_settings(preset, gamma=gamma, tau=tau, q_min=q_min, q_max=q_max)
    if tokenizer is None:
        tokenizer = load_tokenizer(model)
    if model_obj is None:
        model_obj = load_model(model)
    items = rescore(
        run,
        model_obj,
        tokenizer,
        guide=guide,
        batch_size=batch_size,
        limit=limit,
        data_dir=data_dir,
        dataset_files=dataset_files,
    )
    stats = branching_stats(items, tokenizer, tau=guide["tau"])
    out = Path(out)
    title = f"{run.label} under {model or 'the embedded model'}"
    plot_entropy_histogram(stats, out / f"{prefix}_hist.png", title=title)
    write_branching_html(
        items, tokenizer, out / f"{prefix}.html", tau=guide["tau"], title=f"Branching tokens: {title}"
    )
    temperature = float(run.settings.get("temperature") or 1.0)
    return {
        "run": run.label,
        "model": model,
        "guide": guide,
        "temperature": temperature if temperature > 0 else 1.0,
        **stats,
        "files": {"histogram": f"{prefix}_hist.png", "html": f"{prefix}.html"},
    }
