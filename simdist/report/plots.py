"""PNG plots of a run, readable at a glance: titles, axis units, legends."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    # No timestamp in the PNG metadata, so identical runs write identical files.
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def plot_loss_vs_time(metrics: pd.DataFrame, title: str, path: Path) -> None:
    """Training loss (and test accuracy, when evaluated) against simulated time."""
    fig, ax = plt.subplots(figsize=(7, 4))
    loss = metrics[metrics["metric"] == "train_loss"]
    if loss.empty:
        ax.text(
            0.5,
            0.5,
            "timing-only run: no loss computed",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    else:
        ax.plot(loss["time_s"], loss["value"], color="tab:blue", lw=1, label="train loss")
    test = metrics[metrics["metric"] == "test_loss"]
    if not test.empty:
        ax.plot(test["time_s"], test["value"], "o-", color="tab:orange", ms=3, label="test loss")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("loss")
    ax.set_title(f"{title}: loss vs simulated time")
    handles, labels = ax.get_legend_handles_labels()
    acc = metrics[metrics["metric"] == "test_accuracy"]
    if not acc.empty:
        ax2 = ax.twinx()
        ax2.plot(acc["time_s"], acc["value"], "s--", color="tab:green", ms=3, label="test accuracy")
        ax2.set_ylabel("test accuracy")
        ax2.set_ylim(0, 1)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, loc="center right")
    _save(fig, path)
