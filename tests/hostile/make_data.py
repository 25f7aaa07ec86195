"""Write the bad data files of the hostile corpus into tests/hostile/data/.

Run once (``python tests/hostile/make_data.py``); the files are committed (a few KB).
Each is the smallest file that shows one way a data set or a parameter
file can be wrong; the scenario files beside this script point to them and pin the
error each must give.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"


def _good(n_train: int = 40, n_test: int = 10) -> dict[str, np.ndarray]:
    gen = np.random.default_rng(0)
    return {
        "x_train": gen.standard_normal((n_train, 4)).astype(np.float32),
        "y_train": (np.arange(n_train) % 3).astype(np.int64),
        "x_test": gen.standard_normal((n_test, 4)).astype(np.float32),
        "y_test": (np.arange(n_test) % 3).astype(np.int64),
    }


def _with(**arrays: np.ndarray) -> dict[str, np.ndarray]:
    return {**_good(), **arrays}


def _npz_bytes(arrays: dict[str, np.ndarray], pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=pickle, **arrays)
    return buffer.getvalue()


def _params() -> dict[str, np.ndarray]:
    """The keys and shapes of mlp hidden [16] on digits (8x8x1 -> 16 -> 10)."""
    gen = np.random.default_rng(1)
    return {
        "params/Dense_0/bias": np.zeros(16, np.float32),
        "params/Dense_0/kernel": gen.standard_normal((64, 16)).astype(np.float32),
        "params/Dense_1/bias": np.zeros(10, np.float32),
        "params/Dense_1/kernel": gen.standard_normal((16, 10)).astype(np.float32),
    }


_LAYERS_CSV = (
    "# batch_size: 8\n# input_shape: 4\n# bytes_per_param: 4\n"
    "name,forward_flops,backward_flops,forward_bytes,backward_bytes,output_nbytes,param_nbytes\n"
    "fc1,1000,2000,400,800,512,80\nfc2,1000,2000,400,800,512,80\nfc3,500,1000,200,400,96,36\n"
)
_ASTRA = "DATA\n{n}\n" + "".join(
    f"l{i}\t-1\t100\tNONE\t0\t100\tNONE\t0\t200\tALLREDUCE\t1024\t10\n" for i in range(3)
)


def profile_files() -> dict[str, bytes]:
    """File name -> bytes, for the layer profile files (layers.csv, ASTRA-sim) of the corpus."""
    good = _LAYERS_CSV
    return {
        "layers_good.csv": good.encode(),
        "layers_empty.csv": b"",
        "layers_binary.csv": bytes(range(256)) * 4,
        "layers_no_param_nbytes.csv": good.replace(",param_nbytes", "")
        .replace(",80\n", "\n")
        .replace(",36\n", "\n")
        .encode(),
        "layers_nan.csv": good.replace("fc2,1000", "fc2,nan").encode(),
        "layers_negative.csv": good.replace(",96,36", ",96,-36").encode(),
        "layers_truncated.csv": good[: good.index("fc3") + 9].encode(),
        "astra_wrong_count.txt": _ASTRA.format(n=5).encode(),
    }


def files() -> dict[str, bytes]:
    """File name -> bytes, for every data file of the corpus."""
    good = _good()
    nan_x = good["x_train"].copy()
    nan_x[3, 1] = np.nan
    inf_y = np.linspace(0, 1, 40, dtype=np.float32)
    inf_y[7] = np.inf
    object_x = np.empty((40, 4), dtype=object)
    object_x[:] = 1.0
    params = _params()
    nan_params = dict(params)
    nan_params["params/Dense_0/kernel"] = params["params/Dense_0/kernel"].copy()
    nan_params["params/Dense_0/kernel"][0, 0] = np.nan
    whole = _npz_bytes(good)
    bare = io.BytesIO()
    np.save(bare, good["x_train"])
    return {
        "good.npz": whole,
        "nan_x.npz": _npz_bytes(_with(x_train=nan_x)),
        "inf_y.npz": _npz_bytes(
            _with(y_train=inf_y, y_test=np.linspace(0, 1, 10, dtype=np.float32))
        ),
        "string_x.npz": _npz_bytes(_with(x_train=np.full((40, 4), "1.5"))),
        "string_y.npz": _npz_bytes(_with(y_train=np.array(["cat", "dog"] * 20))),
        "complex_x.npz": _npz_bytes(_with(x_train=good["x_train"] + 1j)),
        "object_x.npz": _npz_bytes(_with(x_train=object_x), pickle=True),
        "datetime_x.npz": _npz_bytes(_with(x_train=np.full((40, 4), np.datetime64("2020-01-01")))),
        "float64_huge_x.npz": _npz_bytes(_with(x_train=np.full((40, 4), 1e300))),
        "truncated.npz": whole[: len(whole) // 2],
        "not_a_zip.npz": b"x_train,y_train\n1,2\n",
        "bare_array.npz": bare.getvalue(),
        "empty_archive.npz": _npz_bytes({}),
        "missing_y_test.npz": _npz_bytes({k: v for k, v in good.items() if k != "y_test"}),
        "three_examples.npz": _npz_bytes(_good(n_train=3)),
        "label_3m.npz": _npz_bytes(_with(y_train=np.full(40, 3_000_000, np.int64))),
        "negative_label.npz": _npz_bytes(_with(y_train=np.full(40, -1, np.int64))),
        "labels_2d.npz": _npz_bytes(_with(y_train=np.zeros((40, 2), np.int64))),
        "rows_mismatch.npz": _npz_bytes(_with(y_train=np.zeros(39, np.int64))),
        "feature_mismatch.npz": _npz_bytes(_with(x_test=np.zeros((10, 5), np.float32))),
        "x_1d.npz": _npz_bytes(_with(x_train=np.zeros(40, np.float32))),
        "empty_train.npz": _npz_bytes(
            _with(x_train=np.zeros((0, 4), np.float32), y_train=np.zeros(0, np.int64))
        ),
        "params_strings.npz": _npz_bytes({k: np.full(v.shape, "w") for k, v in params.items()}),
        "params_nan.npz": _npz_bytes(nan_params),
        "params_complex.npz": _npz_bytes({k: v.astype(np.complex64) for k, v in params.items()}),
        "params_truncated.npz": _npz_bytes(params)[:300],
        "params_wrong_keys.npz": _npz_bytes({"params/Dense_9/kernel": np.zeros((2, 2))}),
        "params_wrong_shape.npz": _npz_bytes(
            {**params, "params/Dense_1/kernel": np.zeros((16, 11), np.float32)}
        ),
        **profile_files(),
    }


def main() -> None:
    DATA.mkdir(exist_ok=True)
    for name, data in files().items():
        (DATA / name).write_bytes(data)
    print(f"wrote {len(files())} files to {DATA}")


if __name__ == "__main__":
    main()
