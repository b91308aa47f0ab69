"""The child processes of benchmarks/maxbatch_vs_lightning.py: a plain PyTorch training loop, and Lightning's finder.

    python benchmarks/maxbatch_child.py train --data DIR --batch N --steps S --limit-mib M [--threads 1]
    python benchmarks/maxbatch_child.py lightning --data DIR --mode power|binsearch --limit-mib M
                                        [--train-after S]

Each sets RLIMIT_DATA on itself before importing torch (what batchscope's worker does, so the budgets mean
the same), builds the catalogue's model with batchscope's PyTorch adapter (the same layers and initial weights
as the probes; after that the loop is plain PyTorch), reads the prepared data memory-mapped (file-backed, so
outside RLIMIT_DATA, as in the probes), and prints one JSON line: ``status`` (ok / oom / error), and for
``train`` the step it reached, for ``lightning`` the size its finder answered. A crash shows as the exit
status in the parent. ``train`` runs ``--steps`` SGD steps (momentum 0.9) and then one eval forward pass at
the same size: what a max-batch probe runs, with no harness around it.

``lightning`` needs PyTorch Lightning (``.venv-lightning``: see maxbatch_vs_lightning.py); it runs
``Tuner.scale_batch_size`` with its defaults (init_val 2, max_trials 25, steps_per_trial 3) and, with
``--train-after S``, goes on training S steps at the answer in the same process, as a user would.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIB = 1024 * 1024
OOM_TEXT = ("can't allocate memory", "could not create a primitive", "std::bad_alloc", "Cannot allocate memory",
            "out of memory")


def limit_memory(limit_mib: float) -> None:
    """RLIMIT_DATA on this process, before any framework is imported."""
    limit = int(limit_mib * MIB)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def vmdata_peak_mib() -> float | None:
    """The process's VmPeak is address space; VmData now is the best cheap figure at the end of a run."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) / 1024.0
    return None


def build(data_dir: str, model: str, threads: int) -> tuple[Any, Any, Any]:
    """(torch module, x_train memory-mapped, y_train) with batchscope's adapter's layers and weights."""
    import numpy as np
    import torch

    from adapters.base import OptimizerSpec
    from adapters.pytorch import PyTorchAdapter
    from harness.models import build_description, init_weights

    torch.set_num_threads(threads)
    x = np.load(Path(data_dir) / "x_train.npy", mmap_mode="r")
    y = np.load(Path(data_dir) / "y_train.npy", mmap_mode="r")
    desc = build_description(model, tuple(x.shape[1:]), int(y.max()) + 1)
    adapter = PyTorchAdapter()
    adapter.torch = torch
    adapter.cuda, adapter.device = False, torch.device("cpu")
    adapter.build(desc, init_weights(desc, 0), OptimizerSpec(name="sgd", lr=0.01, momentum=0.9))
    return adapter.model, x, y


def train(args: argparse.Namespace) -> dict[str, Any]:
    """``--steps`` plain SGD steps at ``--batch``, then one eval pass; the step reached if it fails."""
    import numpy as np
    import torch

    net, x, y = build(args.data, args.model, args.threads)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    step = 0
    try:
        for step in range(args.steps + 1):  # the last one is the eval pass
            idx = (np.arange(args.batch) + step * args.batch) % n
            xb = torch.from_numpy(np.ascontiguousarray(x[idx], dtype=np.float32))
            yb = torch.from_numpy(np.ascontiguousarray(y[idx], dtype=np.int64))
            if step == args.steps:
                net.eval()
                with torch.no_grad():
                    net(xb)
                break
            opt.zero_grad(set_to_none=True)
            loss_fn(net(xb), yb).backward()
            opt.step()
    except (RuntimeError, MemoryError) as e:
        text = f"{type(e).__name__}: {e}"
        status = "oom" if any(t in text for t in OOM_TEXT) else "error"
        return {"status": status, "step": step, "reason": text.splitlines()[0][:300]}
    return {"status": "ok", "step": args.steps, "vmdata_end_mib": vmdata_peak_mib()}


def lightning(args: argparse.Namespace) -> dict[str, Any]:
    """Lightning's ``scale_batch_size`` on the same model and data, in this one process."""
    import numpy as np
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.tuner import Tuner

    net, x, y = build(args.data, args.model, args.threads)

    class Data(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return int(x.shape[0])

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            return torch.from_numpy(np.array(x[i], dtype=np.float32)), int(y[i])

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net, self.batch_size = net, 2

        def training_step(self, batch: Any, _: int) -> Any:
            xb, yb = batch
            return torch.nn.functional.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(Data(), batch_size=self.batch_size, shuffle=True, num_workers=0)

    def trainer(max_steps: int) -> Any:
        return pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

    module = Module()
    t = trainer(-1)
    try:
        answer = Tuner(t).scale_batch_size(module, mode=args.mode)
    except Exception as e:  # noqa: BLE001 - the finder's own failure is the measurement
        return {"status": "error", "answer": None, "reason": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    out: dict[str, Any] = {"status": "ok", "answer": answer}
    if args.train_after:
        try:
            trainer(args.train_after).fit(module)
            out["train_after"] = "ok"
        except Exception as e:  # noqa: BLE001 - the same: whether training on works is what is measured
            out["train_after"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one child and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("train", "lightning"))
    parser.add_argument("--data", required=True, help="a prepared data set's directory (x_train.npy, y_train.npy)")
    parser.add_argument("--model", default="tiny_cnn")
    parser.add_argument("--limit-mib", type=float, required=True, help="RLIMIT_DATA of this process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--mode", choices=("power", "binsearch"), default="power")
    parser.add_argument("--train-after", type=int, default=0)
    args = parser.parse_args(argv)
    limit_memory(args.limit_mib)
    try:
        result = train(args) if args.what == "train" else lightning(args)
    except Exception as e:  # noqa: BLE001 - e.g. an import that fails under the limit: reported, not raised
        traceback.print_exc()
        result = {"status": "error", "reason": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if result.get("status") == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
