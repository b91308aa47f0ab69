"""What the bounded worker log costs a normal trial (issue 24): the worker's output through a pipe that the parent
drains keeping its head and tail (as shipped), against the worker writing its log file itself (as before).

Each repeat runs one harness trial of each kind, in an order that flips every repeat, and prints both trials' step
and end-to-end samples/s and their wall time (start-up included, where a pipe's cost would show first); then the
medians of bounded / file. A ratio within the repeats' own spread is "nothing measurable".

    python benchmarks/worker_log_cost.py --frameworks pytorch,tensorflow --repeats 7
"""

from __future__ import annotations

import argparse

from common import FRAMEWORKS, frameworks_option, harness_trial, machine_facts, median, synthetic_data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="pytorch", help="comma-separated, from: " + ", ".join(FRAMEWORKS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    frameworks = frameworks_option(parser, args.frameworks)
    print(machine_facts())
    print(f"model osu_cnn, CPU, {args.threads} thread(s), batch {args.batch}, {args.warmup} warm-up + {args.steps} "
          "timed steps per trial; bounded = the worker's output through the parent's head-and-tail pipe, file = "
          "the worker writing its log file itself\n")
    data = synthetic_data()
    for fw in frameworks:
        ratios: dict[str, list[float]] = {"step": [], "e2e": [], "wall": []}
        print(f"{fw}:")
        for r in range(args.repeats):
            res = {}
            for kind in ("bounded", "file") if r % 2 == 0 else ("file", "bounded"):
                out = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps,
                                    bounded_log=kind == "bounded")
                assert out.metrics is not None
                res[kind] = (out.metrics.step_samples_per_s or 0.0, out.metrics.e2e_samples_per_s or 0.0,
                             out.elapsed_s)
            for i, key in enumerate(("step", "e2e", "wall")):
                ratios[key].append(res["bounded"][i] / res["file"][i])
            print(f"  repeat {r + 1}: bounded step {res['bounded'][0]:8.1f} e2e {res['bounded'][1]:8.1f} samples/s "
                  f"wall {res['bounded'][2]:6.2f} s | file step {res['file'][0]:8.1f} e2e {res['file'][1]:8.1f} "
                  f"wall {res['file'][2]:6.2f} s | bounded/file step {ratios['step'][-1]:.3f} "
                  f"e2e {ratios['e2e'][-1]:.3f} wall {ratios['wall'][-1]:.3f}", flush=True)
        spread = {k: (min(v), max(v)) for k, v in ratios.items()}
        print(f"  median bounded/file: step {median(ratios['step']):.3f} (range {spread['step'][0]:.3f}-"
              f"{spread['step'][1]:.3f}), e2e {median(ratios['e2e']):.3f} ({spread['e2e'][0]:.3f}-"
              f"{spread['e2e'][1]:.3f}), wall {median(ratios['wall']):.3f} ({spread['wall'][0]:.3f}-"
              f"{spread['wall'][1]:.3f})\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
