"""What the ablation studies write: tables with mean ± std over seeds, and their pictures.

Pure Python over the rows of a study's results.json (one row per (label, seed); see
albert_tf/research/ablations.py); TensorFlow is not needed, matplotlib only for the PNG files
(albert_tf/research/plots.py).

Statistics: each cell is the mean over the row's seeds ± the sample standard deviation
(n - 1 in the denominator); a cell is "within noise" of its reference row's cell when the
difference of the means is at most two standard errors of that difference,
2 * sqrt(s1^2 / n1 + s2^2 / n2) (about a 95% band for large n; at n = 3 a difference just
outside it is only suggestive). Cells of rows with fewer than two seeds are not compared.
"""

from __future__ import annotations

import logging
import math
import os

from albert_tf import fileio
from albert_tf.research import plots

_logger = logging.getLogger(__name__)

INTRINSIC = (
    ("masked_lm_accuracy", "MLM acc"),
    ("sop_accuracy", "SOP acc"),
    ("nsp_accuracy", "NSP acc"),
)
WITHIN_NOISE = "≈"
NOISE_RULE = (
    f"{WITHIN_NOISE}: within noise of the (ref) row it is compared with, i.e. "
    "|difference of the means| <= 2 sqrt(s^2/n + s_ref^2/n_ref) (two standard errors "
    "of the difference); not marked when either row has n < 2."
)


# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------
def mean_std(values) -> tuple[float, float | None, int]:
    """(mean, sample standard deviation or None when n < 2, n) of a non-empty list."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("mean_std of no values")
    mean = sum(values) / n
    if n < 2:
        return mean, None, n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)), n


def within_noise(a: tuple, b: tuple) -> bool | None:
    """Whether two (mean, std, n) differ by at most two standard errors of the difference;
    None when either has n < 2 (no std, nothing to compare with)."""
    (mean_a, std_a, n_a), (mean_b, std_b, n_b) = a, b
    if std_a is None or std_b is None:
        return None
    return abs(mean_a - mean_b) <= 2 * math.sqrt(std_a**2 / n_a + std_b**2 / n_b)


def row_scores(row: dict, task_titles: dict) -> dict[str, float]:
    """Column title -> value (x100; SQuAD F1 as is) of one (label, seed) row: the intrinsic
    accuracies, each task's best dev score and, with several tasks, their average."""
    scores = {title: 100 * row[key] for key, title in INTRINSIC if key in row}
    tasks = {
        task_titles[t]: v["value"] * (1 if t.startswith("squad") else 100)
        for t, v in row.get("tasks", {}).items()
    }
    scores.update(tasks)
    if len(tasks) > 1:
        scores["Avg"] = sum(tasks.values()) / len(tasks)
    return scores


def aggregate(rows: list[dict], labels: list[str], task_titles: dict) -> dict[str, dict]:
    """label -> {"n": seeds, "seeds": [...], "parameters": int, "scores": {column: (mean,
    std, n)}} for the labels (in that order) that have rows."""
    out = {}
    for label in labels:
        mine = sorted((r for r in rows if r["label"] == label), key=lambda r: r["random_seed"])
        if not mine:
            continue
        per_seed = [row_scores(r, task_titles) for r in mine]
        columns = list(dict.fromkeys(c for s in per_seed for c in s))
        out[label] = {
            "n": len(mine),
            "seeds": [r["random_seed"] for r in mine],
            "parameters": mine[0]["parameters"],
            "scores": {c: mean_std([s[c] for s in per_seed if c in s]) for c in columns},
        }
    return out


def _cell(stats, reference=None, standard_error=False) -> str:
    if stats is None:
        return ""
    mean, std, n = stats
    spread = std if std is None or not standard_error else std / math.sqrt(n)
    text = f"{mean:.1f}" if spread is None else f"{mean:.1f} ± {spread:.1f}"
    if reference is not None and within_noise(stats, reference):
        text += f" {WITHIN_NOISE}"
    return text


def _compared_references(summary: dict, references: dict) -> set[str]:
    """The reference labels that have rows and at least one row compared with them."""
    return {ref for label, ref in references.items() if label in summary and ref in summary}


def _columns(summary: dict) -> list[str]:
    order = [title for _, title in INTRINSIC]
    found = list(dict.fromkeys(c for s in summary.values() for c in s["scores"]))
    tasks = [c for c in found if c not in order and c != "Avg"]
    return [c for c in order if c in found] + tasks + (["Avg"] if "Avg" in found else [])


# --------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------
def summary_table(
    rows: list[dict],
    labels: list[str],
    references: dict,
    task_titles: dict,
    standard_error: bool = False,
) -> str:
    """The study's table: one line per label (study order) with n, parameters and
    mean ± std of every column (± the standard error of the mean, std / sqrt(n), with
    `standard_error`); `references`: label -> the label it is compared with."""
    summary = aggregate(rows, labels, task_titles)
    columns = _columns(summary)
    header = ["Variant", "n", "Params", *columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    is_reference = _compared_references(summary, references)
    for label, s in summary.items():
        ref = summary.get(references.get(label))
        cells = [
            label + (" (ref)" if label in is_reference else ""),
            str(s["n"]),
            f"{s['parameters'] / 1e6:.2f}M",
        ]
        cells += [
            _cell(s["scores"].get(c), ref and ref["scores"].get(c), standard_error) for c in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    seeds = sorted({seed for s in summary.values() for seed in s["seeds"]})
    spread = (
        "standard error of the mean (sample standard deviation / sqrt(n))"
        if standard_error
        else "sample standard deviation (n - 1)"
    )
    notes = [
        (
            f"Mean ± {spread} over n pretraining seeds (seeds "
            f"{', '.join(map(str, seeds))}). Accuracies and scores x100; SQuAD: F1."
        )
    ]
    if is_reference:
        groups = {
            ref: [label for label in summary if references.get(label) == ref]
            for ref in summary
            if ref in is_reference
        }
        if len(groups) > 1:
            notes.append(
                "Compared with: "
                + "; ".join(f"{ref}: {', '.join(those)}" for ref, those in groups.items())
                + "."
            )
        notes.append(NOISE_RULE)
    return "\n".join(lines) + "\n\n" + " ".join(notes) + "\n"


def per_seed_table(rows: list[dict], labels: list[str], task_titles: dict) -> str:
    """Every (label, seed) row as measured, in study order then seed."""
    ordered = sorted(
        rows,
        key=lambda r: (
            labels.index(r["label"]) if r["label"] in labels else len(labels),
            r["random_seed"],
        ),
    )
    per_seed = [row_scores(r, task_titles) for r in ordered]
    columns = _columns({i: {"scores": s} for i, s in enumerate(per_seed)})
    header = ["Variant", "Seed", "Params", *columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r, scores in zip(ordered, per_seed):
        cells = [r["label"], str(r["random_seed"]), f"{r['parameters'] / 1e6:.2f}M"]
        cells += ["" if c not in scores else f"{scores[c]:.1f}" for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def smoothness_summary(measurements: dict[str, list[dict]]) -> dict[str, dict]:
    """label -> {"l2_distance" / "angle_degrees" / "cosine_similarity": [(mean, std, n)
    per layer]} over the label's measurements (albert_tf.research.smoothness.measure results, one
    per seed or checkpoint)."""
    out = {}
    for label, runs in measurements.items():
        layers = len(runs[0]["l2_distance"])
        out[label] = {
            key: [mean_std([r[key][layer] for r in runs]) for layer in range(layers)]
            for key in ("l2_distance", "angle_degrees", "cosine_similarity")
        }
    return out


def smoothness_table(measurements: dict[str, list[dict]]) -> str:
    """Per layer: each label's L2 distance and angle (degrees) between the layer's input and
    output, mean ± std over its measurements."""
    summary = smoothness_summary(measurements)
    labels = list(summary)
    header = (
        ["Layer"] + [f"{label} L2" for label in labels] + [f"{label} angle (°)" for label in labels]
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for layer in range(max(len(s["l2_distance"]) for s in summary.values())):
        cells = [str(layer)]
        for key in ("l2_distance", "angle_degrees"):
            for label in labels:
                values = summary[label][key]
                cells.append(_cell(values[layer]) if layer < len(values) else "")
        lines.append("| " + " | ".join(cells) + " |")
    counts = ", ".join(
        f"{label}: n = {len(runs)}, {runs[0]['tokens']} tokens"
        for label, runs in measurements.items()
    )
    return (
        "\n".join(lines) + "\n\nLayer l: from the state entering layer l (layer 0: the "
        "embeddings after the E -> H projection) to the state leaving it; means over the "
        "real (not padding) tokens of the held-out text; angle = arccos of the cosine "
        f"similarity, averaged per token; ± the std over n measurements ({counts}).\n"
    )


# --------------------------------------------------------------------------------------
# Learning curves
# --------------------------------------------------------------------------------------
def curve_summary(
    rows: list[dict], labels: list[str], key: str = "masked_lm_accuracy"
) -> dict[str, tuple[list, list]]:
    """label -> (steps, [(mean, std, n) of x100 `key` at each step over the label's seeds])
    from the rows' "curve" entries (rows without one are skipped)."""
    out = {}
    for label in labels:
        curves = [r["curve"] for r in rows if r["label"] == label and r.get("curve")]
        by_step = {}
        for curve in curves:
            for step, value in zip(curve["global_step"], curve[key]):
                by_step.setdefault(step, []).append(100 * value)
        if by_step:
            steps = sorted(by_step)
            out[label] = (steps, [mean_std(by_step[s]) for s in steps])
    return out


# --------------------------------------------------------------------------------------
# A study's files
# --------------------------------------------------------------------------------------
def write_study_report(
    study_dir,
    study: str,
    rows: list[dict],
    labels: list[str],
    references: dict,
    task_titles: dict,
    standard_error: bool = False,
) -> list[str]:
    """Writes results.md and the pictures (results.png, learning_curves.png and, when rows
    carry smoothness measurements, smoothness.png) into `study_dir`. Returns the paths
    written. `standard_error`: results.md gives mean ± standard error (else ± std)."""
    text = f"# Study {study}\n\n" + summary_table(
        rows, labels, references, task_titles, standard_error
    )
    measurements = {}
    for label in labels:
        runs = [
            r["smoothness"]
            for r in sorted(rows, key=lambda r: r["random_seed"])
            if r["label"] == label and "smoothness" in r
        ]
        if runs:
            measurements[label] = runs
    if measurements:
        text += "\n## Per layer (Figure 1)\n\n" + smoothness_table(measurements)
    text += "\n## Per seed\n\n" + per_seed_table(rows, labels, task_titles)
    written = [os.path.join(study_dir, "results.md")]
    fileio.atomic_write_text(written[0], text)
    if not plots.available():
        _logger.info(plots.MISSING)
        return written

    summary = aggregate(rows, labels, task_titles)
    columns = _columns(summary)
    is_reference = _compared_references(summary, references)
    bars = {c: [summary[label]["scores"].get(c) for label in summary] for c in columns}
    counts = {s["n"] for s in summary.values()}
    path = os.path.join(study_dir, "results.png")
    if counts == {1}:
        title = f"{study}: one seed (no error bars)"
    else:
        title = f"{study}: mean ± std over " + (
            f"{counts.pop()} seeds" if len(counts) == 1 else "seeds (n: results.md)"
        )
    plots.study_bars(path, title, list(summary), bars, [label in is_reference for label in summary])
    written.append(path)
    curves = curve_summary(rows, labels)
    if curves:
        path = os.path.join(study_dir, "learning_curves.png")
        plots.learning_curves(path, f"{study}: held-out masked-LM accuracy", curves)
        written.append(path)
    if measurements:
        path = os.path.join(study_dir, "smoothness.png")
        plots.smoothness(
            path,
            f"{study}: layer input vs output (mean ± std over seeds)",
            smoothness_summary(measurements),
        )
        written.append(path)
    return written


__all__ = [
    "mean_std",
    "within_noise",
    "row_scores",
    "aggregate",
    "summary_table",
    "per_seed_table",
    "smoothness_summary",
    "smoothness_table",
    "curve_summary",
    "write_study_report",
    "NOISE_RULE",
    "WITHIN_NOISE",
]
