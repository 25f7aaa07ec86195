"""What a task allows: the test accuracy one device reaches on a bundled data set.

``collapsed`` (simdist.summary) flags a run that ended below half of the way from chance to
this accuracy. The figure is measured here, once, and written into simdist.summary's
``TASK_CEILINGS``: for each data set, the trainable zoo models that accept its examples are
trained by one_device with a few optimizers and step sizes, three seeds each; a
configuration's accuracy is the mean over its seeds of the final test accuracy, and the
ceiling is the best configuration's.

    python benchmarks/task_ceiling.py [--steps 3000]
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import simdist

#: (model, optimizer): data sets of flat vectors take the dense models.
CONFIGS = {
    "digits": [
        (model, optimizer)
        for model, optimizer in itertools.product(
            ("softmax", "mlp"),
            (
                {"name": "sgd", "learning_rate": 0.1},
                {"name": "sgd", "learning_rate": 0.5},
                {"name": "momentum", "learning_rate": 0.05, "momentum": 0.9},
                {"name": "adam", "learning_rate": 0.001},
            ),
        )
    ],
}
SEEDS = (0, 1, 2)


def scenario(dataset: str, model: str, optimizer: dict, steps: int, seed: int) -> dict:
    """One device training ``model`` on ``dataset``, evaluated at the end."""
    return {
        "name": f"ceiling_{dataset}_{model}",
        "seed": seed,
        "cluster": {"hosts": 1, "devices_per_host": 1, "device": {"profile": "v100"}},
        "workload": {
            "model": model,
            "dataset": dataset,
            "batch_size": 32,
            "optimizer": optimizer,
            "steps": steps,
            "eval_every": steps,
        },
        "strategy": {"kind": "one_device"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    steps = parser.parse_args().steps
    for dataset, configs in CONFIGS.items():
        best = 0.0
        for model, optimizer in configs:
            accuracies = [
                simdist.run(scenario(dataset, model, optimizer, steps, seed)).summary[
                    "final_test_accuracy"
                ]
                for seed in SEEDS
            ]
            mean = statistics.fmean(accuracies)
            best = max(best, mean)
            low, high = min(accuracies), max(accuracies)
            print(f"{dataset} {model} {optimizer}: {mean:.4f} ({low:.4f}-{high:.4f})")
        print(f"{dataset}: ceiling {best:.4f}")


if __name__ == "__main__":
    main()
