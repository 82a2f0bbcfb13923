"""The ablation studies' pictures, drawn with matplotlib (an optional extra:
`pip install -e ".[plots]"`).

matplotlib is imported only when a picture is drawn; `available()` says whether it can
be, so that a study without it still writes its numbers and says how to get the
pictures (`MISSING`). Every function takes numbers already aggregated: a statistic is
a (mean, std or None, n) tuple (albert_tf.research.ablation_report.mean_std).
"""

from __future__ import annotations

MISSING = "pip install -e '.[plots]' for the PNG pictures"
_REFERENCE_COLOR, _OTHER_COLOR = "tab:orange", "tab:blue"


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    return pyplot


def _save(figure, path):
    import io

    from albert_tf import fileio

    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=120)
    fileio.atomic_write_bytes(path, png.getvalue())
    _pyplot().close(figure)


def _means_stds(stats):
    means = [float("nan") if s is None else s[0] for s in stats]
    stds = [0.0 if s is None or s[1] is None else s[1] for s in stats]
    return means, stds


def study_bars(
    path, title: str, labels: list[str], columns: dict[str, list], is_reference: list[bool]
) -> None:
    """One panel per column (metric): a bar per row (in `labels` order) at its mean with
    an error bar of ± one std; reference rows in another colour.

    columns: title -> one statistic (or None) per label.
    """
    plt = _pyplot()
    count = len(columns)
    per_line = min(count, 4)
    lines = -(-count // per_line)
    width = max(3.2, 0.45 * len(labels) + 1.2)
    figure, axes = plt.subplots(
        lines, per_line, figsize=(width * per_line, 3.6 * lines), squeeze=False
    )
    colors = [_REFERENCE_COLOR if ref else _OTHER_COLOR for ref in is_reference]
    for ax, (column, stats) in zip(axes.flat, columns.items()):
        means, stds = _means_stds(stats)
        positions = range(len(labels))
        ax.bar(
            positions, means, yerr=stds, capsize=4, color=colors, edgecolor="black", linewidth=0.5
        )
        ax.set_title(column)
        ax.set_xticks(list(positions), labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylim(bottom=0)  # bars from zero: differences look as large as they are
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    figure.suptitle(title + " (orange: reference rows)" if any(is_reference) else title)
    _save(figure, path)


def learning_curves(path, title: str, curves: dict[str, tuple[list, list]]) -> None:
    """Held-out accuracy (%) against pretraining steps, one line per row with a ± std band
    (the layout of the paper's Figure 2). curves: label -> (steps, statistics)."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, (steps, stats) in curves.items():
        means, stds = _means_stds(stats)
        (line,) = ax.plot(steps, means, marker="o", markersize=3, label=label)
        ax.fill_between(
            steps,
            [m - s for m, s in zip(means, stds)],
            [m + s for m, s in zip(means, stds)],
            color=line.get_color(),
            alpha=0.2,
        )
    ax.set_xlabel("Pretraining steps")
    ax.set_ylabel("Held-out masked-LM accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(figure, path)


def score_vs_steps(
    path, title: str, columns: dict[str, tuple[list, list]], chance: dict[str, float] | None = None
) -> None:
    """Fine-tuned score (x100) against pretraining steps (0: from scratch), one line per
    task with error bars of the statistics' spread. columns: title -> (steps, statistics).
    chance: legend label -> the score of guessing, each a dashed line."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for (label, value), style in zip((chance or {}).items(), ("--", ":")):
        ax.axhline(value, color="gray", linestyle=style, linewidth=1, label=label)
    for label, (steps, stats) in columns.items():
        means, stds = _means_stds(stats)
        ax.errorbar(steps, means, yerr=stds, marker="o", markersize=4, capsize=3, label=label)
    ax.set_xlabel("Pretraining steps (0: from scratch)")
    ax.set_ylabel("Best dev score after fine-tuning (x100)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(figure, path)


def smoothness(path, title: str, summary: dict[str, dict]) -> None:
    """The paper's Figure 1: L2 distance (left) and angle in degrees (right) between each
    layer's input and output against the layer index, one line per model with ± std bars.
    summary: label -> {"l2_distance": [stat per layer], "angle_degrees": [...]}."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (("l2_distance", "L2 distance"), ("angle_degrees", "Cosine similarity (degrees)"))
    for ax, (key, name) in zip(axes, panels):
        for label, values in summary.items():
            means, stds = _means_stds(values[key])
            ax.errorbar(
                range(len(means)),
                means,
                yerr=stds,
                marker="o",
                markersize=4,
                capsize=3,
                label=label,
            )
        ax.set_xlabel("Layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(name)
        ax.set_title(name)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    _save(figure, path)


__all__ = [
    "available",
    "study_bars",
    "learning_curves",
    "score_vs_steps",
    "smoothness",
    "MISSING",
]
