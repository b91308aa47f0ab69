"""The facts around the measurements: the machine, the method, and whether there was a GPU.

Everything here is worded from the stored run (the resolved experiment, the environment the parent
captured, the versions each worker reported); nothing is assumed about a run that the store does
not say.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from harness.cells import Cell, queued_windows
from harness.monitor.fields import NO_GPU_NOTICE
from harness.store import TrialRecord
from report.answer.environments import environment_notes
from report.answer.studies import line_label
from report.load import StoredExperiment


def _fmt_mib(value: Any) -> str:
    try:
        return f"{float(value) / 1024:.1f} GiB ({float(value):.0f} MiB)"
    except (TypeError, ValueError):
        return "-"


def gpu_name(exp: StoredExperiment) -> str | None:
    """The GPU the run saw (None when it had none)."""
    name = exp.env().get("gpu_name")
    return str(name) if name else None


def had_gpu(exp: StoredExperiment) -> bool:
    """Whether the run had a GPU: NVML saw one, or a trial ran on a CUDA/GPU device."""
    if gpu_name(exp):
        return True
    return any(str(t.device or "").startswith(("cuda", "gpu")) for t in exp.trials)


def _gpu_note(exp: StoredExperiment) -> str:
    """Why the run saw no GPU, without the sampler's generic preamble (it would repeat the banner)."""
    note = str(exp.env().get("gpu_note") or "")
    if note.startswith(NO_GPU_NOTICE):
        note = note[len(NO_GPU_NOTICE):].strip().removeprefix("(").removesuffix(")")
    return note


def no_gpu_banner(exp: StoredExperiment) -> str | None:
    """The banner a reader must see first when the run had no GPU (None when it had one)."""
    if had_gpu(exp):
        return None
    note = _gpu_note(exp)
    return (f"This run had no GPU{f' ({note})' if note else ''}. Every trial ran on the CPU, so there are no "
            "GPU utilisation, GPU memory or energy figures, and the throughput figures describe this CPU, "
            "not a GPU.")


def environment_rows(exp: StoredExperiment) -> list[tuple[str, str]]:
    """(label, value) rows of the environment table."""
    env = exp.env()
    gpus = env.get("gpus") or []
    if gpus:
        gpu = "; ".join(f"{g.get('name', '?')} ({_fmt_mib(g.get('memory_total_mib'))})" for g in gpus)
    elif env.get("gpu_name"):
        gpu = f"{env['gpu_name']} ({_fmt_mib(env.get('gpu_memory_mib'))})"
    else:
        gpu = f"none ({_gpu_note(exp) or 'no GPU seen'})"
    rows = [
        ("GPU", gpu),
        *used_gpu_rows(exp),
        ("Driver / CUDA (driver API)", f"{env.get('driver') or '-'} / {env.get('cuda_driver') or '-'}"),
        ("CPU", f"{env.get('cpu_model') or '-'} ({env.get('cpu_count') or '?'} logical cores)"),
        ("RAM", f"{env['ram_gib']} GiB" if env.get("ram_gib") is not None else "-"),
        ("OS", str(env.get("os") or "-")),
        ("Python (parent)", str(env.get("python") or "-")),
    ]
    if env.get("gpu_note") and gpus:
        rows.append(("GPU note", str(env["gpu_note"])))
    where = exp.environments()
    for fw, pkgs in sorted(exp.versions().items()):
        rows.append((f"{fw} worker", ", ".join(f"{p} {v}" for p, v in sorted(pkgs.items()))))
        if where.get(fw):
            rows.append((f"{fw} environment", f"{where[fw].get('environment', '-')} ({where[fw].get('python', '-')})"))
    rows += [("Environments", note) for note in environment_notes(exp)]
    devices = sorted({str(t.device) for t in exp.trials if t.device})
    if devices:
        rows.append(("Device(s) trained on", ", ".join(devices)))
    rows.append(("CPU workers' allocator settings", cpu_worker_env_words(env)))
    return rows + node_rows(exp)


def used_gpu_rows(exp: StoredExperiment) -> list[tuple[str, str]]:
    """The GPU(s) the trials were sampled on (each trial's ``gpu_used``: its CUDA index, name and UUID), with how
    many trials each: the machine's GPU list above is every GPU NVML sees, not the ones the trials used."""
    used: dict[str, int] = {}
    for t in exp.trials:
        if gpu := t.sampler.get("gpu_used"):  # a sampler column: the record keeps the sampler's by name
            used[str(gpu)] = used.get(str(gpu), 0) + 1
    if not used:
        return []
    return [("GPU(s) the trials used", "; ".join(f"{name}: {n} trial(s)" for name, n in sorted(used.items())))]


def node_rows(exp: StoredExperiment) -> list[tuple[str, str]]:
    """One row per Ray node the trials ran on (issue 23): its host, how many trials, which GPUs, and how many trials
    ran concurrently on it. None for a run on the local executor (no node ids), whose trials ran one at a time on
    the machine above; on a cluster the rows above describe the machine that ran the driver."""
    nodes: dict[str, list[TrialRecord]] = {}
    for t in exp.trials:
        if t.placement.node_id:
            nodes.setdefault(str(t.placement.node_id), []).append(t)
    rows = []
    for node_id, trials in sorted(nodes.items(), key=lambda kv: (str(kv[1][0].placement.host), kv[0])):
        host = trials[0].placement.host or "?"
        gpus = sorted({int(t.placement.device_index) for t in trials if t.placement.device_index is not None})
        packed = max(int(t.placement.concurrent_n or 1) for t in trials)
        reruns = sum(1 for t in trials if (t.placement.attempt or 1) > 1)
        text = f"{len(trials)} trial(s)"
        if gpus:
            text += f" on GPU(s) {', '.join(map(str, gpus))}, one GPU each"
        text += (f"; {packed} trials ran concurrently on this node" if packed > 1 else
                 "; one trial at a time on this node" if not gpus else "")
        if reruns:
            text += f"; {reruns} re-run here after their node died"
        rows.append((f"Node {host} ({node_id[:8]})", text))
    lost = sum(1 for t in exp.trials if t.status == "lost")
    if lost:
        rows.append(("Lost trials", f"{lost} trial(s) whose node died twice: not results; `batchscope run --resume` "
                                    "runs them again"))
    return rows


def cpu_worker_env_words(env: dict[str, Any]) -> str:
    """What the run's CPU workers ran with (``cpu_worker_env``, issue 22): the allocator variables, or the defaults.

    Runs from issues 18-21 recorded ``MALLOC_MMAP_THRESHOLD_=131072``, which every CPU worker then had (PyTorch's
    throughput at 0.57x); runs from before issue 18 recorded nothing.
    """
    if "cpu_worker_env" not in env:
        return "not recorded (a run from before issue 18)"
    recorded = env.get("cpu_worker_env") or {}
    if not isinstance(recorded, dict) or not recorded:
        return "none: glibc's and the frameworks' defaults, as a plain training script runs"
    return " ".join(f"{k}={v}" for k, v in sorted(recorded.items()))


def _distinct(exp: StoredExperiment, field: Callable[[TrialRecord], Any]) -> list[Any]:
    """The distinct values of one field of the trials (``lambda t: t.settings.seed``), sorted; None left out."""
    return sorted({v for t in exp.trials if (v := field(t)) is not None})


def _seen_per_framework(exp: StoredExperiment, field: Callable[[TrialRecord], Any]) -> list[str]:
    """``framework: a/b`` per line (a framework, or a framework under one of a study's variants): the distinct values
    its ok trials stored in ``field`` ("not recorded" where none did)."""
    out = []
    for line in exp.line_series:
        seen = sorted({str(v) for t in exp.ok_trials if t.series.line == line and (v := field(t))})
        out.append(f"{line_label(line)}: {'/'.join(seen) or 'not recorded'}")
    return out


def _denormals_paragraph(exp: StoredExperiment) -> str:
    """What the CPU did with denormal floats, per framework, as the trials recorded it."""
    asked = _distinct(exp, lambda t: t.settings.denormals) or ["?"]
    per_fw = _seen_per_framework(exp, lambda t: t.metrics.cpu_denormals)
    return ("<b>Denormal floats.</b> Asked for: denormals = " + "/".join(map(str, asked)) + ". What the "
            "CPU did in each framework's trials: " + "; ".join(per_fw) + ". 'flush' means denormal results "
            "and inputs are treated as zero (FTZ/DAZ); 'keep' means they are computed exactly, at the cost of "
            "a microcode assist per operation on x86, which can slow a trial down many times once weights "
            "become tiny (docs/denormals.md). TensorFlow's CPU kernels always flush.")


def _math_mode_paragraph(exp: StoredExperiment) -> str:
    """What float32 convolutions and matmuls computed in, per framework, as each framework read it back."""
    asked = _distinct(exp, lambda t: t.settings.math_mode) or ["not recorded"]
    per_fw = _seen_per_framework(exp, lambda t: t.metrics.math_mode_seen)
    return ("<b>Math mode.</b> Asked for: math_mode = " + "/".join(map(str, asked)) + ". What each framework "
            "computed float32 convolutions and matmuls in, read back from it: " + "; ".join(per_fw) + ". 'ieee' "
            "is true float32; 'tf32' TensorFloat-32 tensor cores (10-bit mantissa inputs, Ampere and newer GPUs), "
            "up to several times faster; 'n/a' a CPU trial, where the question does not arise. Speeds compare "
            "frameworks only under one math mode; MFU divides by the peak of the arithmetic that ran "
            "(docs/precision.md).")


def _compile_cache_memory_text(exp: StoredExperiment) -> str:
    """The Memory paragraph's sentence on trials that read their compiled step back from the persistent compilation
    cache (``compile_cache`` = warm): their host peak leaves the compiler's memory out, which a trial that compiled
    (cold, or the cache off) holds; nothing where no trial was warm."""
    warm = [t for t in exp.trials if t.metrics.compile_cache == "warm"]
    if not warm:
        return ""
    frameworks = sorted({str(t.settings.framework) for t in warm})
    compiled = sorted({str(t.settings.framework) for t in exp.trials
                       if t.metrics.compile_cache in ("cold", "off") and str(t.settings.framework) in frameworks})
    text = (f" <b>Compiled steps read from the cache.</b> {len(warm)} trial(s) ({', '.join(frameworks)}) read their "
            "compiled training step back from the persistent compilation cache (compile_cache = warm): on a CPU "
            "their host peak leaves out the compiler's own memory, which a first run of the same program holds "
            "(JAX, deep_cnn at batch 66: 901 MiB compiling, 662 MiB read back; docs/maxbatch.md, whose search "
            "compiles in every run).")
    if compiled:
        text += (f" Here {', '.join(compiled)} also has trials that compiled: host peaks of the two kinds are not "
                 "like for like (the store's compile_cache column says which trial is which).")
    return text


def _queued_steps_text(exp: StoredExperiment) -> str:
    """The Timing paragraph's sentence on trials whose clock was read over windows of queued steps (issue 40), or
    nothing where every trial read it after every step."""
    windows = queued_windows(exp.trials)
    if not windows:
        return ""
    which = "; ".join(f"{fw}: up to {w} steps" for fw, w in sorted(windows.items()))
    return (" <b>Queued steps.</b> Where a framework's engine runs asynchronously and its adapter can queue steps, "
            f"the clock is read after a window of steps, not after each ({which}; fewer at a large batch, so that the "
            "queued inputs stay under 16 MiB): each step of a window is given the window's mean time, so its median "
            "and IQR are those of window means. Waiting after every step cost MXNet 1.4-3.7% of a CPU step at batch 64 "
            "(docs/benchmarks.md). Warm-up steps are waited for one by one, and a window ends before each "
            "evaluation and each phase change.")


def method_paragraphs(exp: StoredExperiment, cell_list: list[Cell]) -> list[str]:
    """The method section, worded from the experiment's resolved spec and its trials.

    The Method section's paragraphs in reading order (timing, denormals, math mode, sampling, memory, workload,
    variants, failures), each worded from the spec's fields and what the trials stored. About 65 lines because it
    is that list of paragraphs in order; the longer ones already have a function each.
    """
    spec = exp.spec
    paras = []
    warm = _distinct(exp, lambda t: t.metrics.warmup_steps_n) or [spec.get("warmup_steps", "?")]
    measured = _distinct(exp, lambda t: t.metrics.measured_steps_n)
    measured_text = (f"{min(measured)}-{max(measured)}" if len(measured) > 1 else str(measured[0])) if measured else "?"
    paras.append(
        "<b>Timing.</b> Every trial runs in a fresh worker process. The first "
        f"{'/'.join(map(str, warm))} training step(s) are warm-up and are not counted; every step after "
        f"them counts ({measured_text} per trial here), each clock read taken after the device has finished "
        "its work (the train step returns only when the device is idle). Two throughput figures per trial: "
        "<i>step throughput</i> (step_samples_per_s) is the batch size divided by the <i>median</i> time of "
        "the forward, backward and update over all those steps, with their inter-quartile range (IQR) as "
        "the spread: the framework's device work. <i>End-to-end throughput</i> (e2e_samples_per_s) is the "
        "samples of all those steps divided by their wall time, batch preparation included: what the user "
        "waits for. <b>Drift:</b> the median step time of the last tenth of those steps is compared with "
        "the first tenth's; a change larger than both 10% and the steps' own spread (mean IQR of the two "
        "windows) flags the trial, and the tables give its size. Across repeats the report shows the "
        "mean ± sample standard deviation of the trials that finished (harness/cells.py: the same "
        "statistic the command line and <i>compare</i> print)." + _queued_steps_text(exp))
    paras.append(_denormals_paragraph(exp))
    paras.append(_math_mode_paragraph(exp))
    intervals = _distinct(exp, lambda t: t.sample_interval_ms)
    interval = (f"every {'/'.join(f'{v:.0f}' for v in intervals)} ms" if intervals
                else f"every {spec.get('sample_interval_ms', '?')} ms (configured; no samples are stored)")
    paras.append(
        f"<b>Sampling.</b> A sampler thread in the parent polls the GPU (NVML) and the host {interval}; "
        "the figures are means over the timed phase. NVML's <i>GPU utilisation</i> is the share of time "
        "in which <i>any</i> kernel was running on the GPU, averaged by the driver over 1/6 to 1 s; it "
        "says nothing about how many SMs were busy, so a small kernel running all the time reads 100%. "
        "Intervals shorter than the driver's window repeat values.")
    paras.append(
        "<b>Memory, in three views.</b> <i>framework allocator peak</i> (framework_peak_mib): the peak "
        "of memory handed out by the framework's own allocator, as the framework reports it (not every "
        "framework can on every device); <i>worker-tree GPU memory</i> (proc_gpu_mem_peak_mib): what NVML "
        "charges to the worker process and its children, which includes the framework's cache and the "
        "CUDA context; <i>device memory used</i> (gpu_mem_used_peak_mib): the whole card's used memory, "
        "including other processes. Host memory is the peak resident set size of the worker "
        "(rss_peak_mib)." + _compile_cache_memory_text(exp))
    variants = [v for v in spec.get("variants") or [] if isinstance(v, dict)]
    paras.append(_workload_paragraph(exp, variants))
    if variants:
        paras.append("<b>Variants.</b> " + "; ".join(
            f"<i>{v.get('name')}</i>: " + (", ".join(f"{k} = {json.dumps(val, default=str)}"
                                                   for k, val in (v.get("settings") or {}).items()) or "the defaults")
            for v in variants) + ". Each variant x framework x batch size x repeat is one trial; with "
            "accumulate_steps = k an update sees k micro-batches (effective batch = batch x k).")
    if any(k not in spec for k in ("warmup_steps", "timed_steps", "model", "dataset", "optimizer", "device")):
        # hand-made or partial stores: say what "?" means rather than leave the reader guessing
        paras.insert(0, "<i>This store holds no complete resolved specification for the experiment (its run "
                        "row lacks one); values it would give are printed as “?”.</i>")
    n_fail = sum(c.n - c.n_ok for c in cell_list)
    if n_fail:
        where = ("are marked on the figures and counted in the tables' status column" if exp.ok_trials
                 else "are listed with their reasons in the table “What happened to each trial”")
        paras.append(f"<b>Failures.</b> {n_fail} trial(s) did not finish; they {where}. Sizes larger than one "
                     "that ran out of memory are recorded as <i>skipped</i> unless the sweep was run with "
                     "--no-skip-larger.")
    return paras


def _workload_paragraph(exp: StoredExperiment, variants: list[dict[str, Any]]) -> str:
    """The Method's workload: the data, the model, the training, the optimizer, the repeats, the device."""
    spec = exp.spec
    data = spec.get("data") or {}
    shape = data.get("input_shape")
    dataset = (f"{data.get('name', spec.get('dataset', '?'))}: {data.get('n_train', '?')} training and "
               f"{data.get('n_test', '?')} test samples of shape {'×'.join(map(str, shape)) if shape else '?'}, "
               f"{data.get('classes', '?')} classes")
    if data and not data.get("accuracy_meaningful", True):
        dataset += " (synthetic data with random labels: its accuracy means nothing)"
    params = _distinct(exp, lambda t: t.param_count)
    models = [str(m) for m in _distinct(exp, lambda t: t.settings.model)] or [str(spec.get("model", "?"))]
    model = "/".join(models) + (f", {'/'.join(f'{p:,}' for p in params)} parameters" if params else "")
    if any(m.startswith("native:") for m in models):  # harness.models.native: one framework's own model
        model += (" (native model: the framework's own, with its own parameter count and initial weights; no "
                  "comparison across frameworks is claimed)")
    epochs = spec.get("epochs", 0)
    epochs_text = (f"{epochs} epoch(s): every training sample seen once per epoch, whatever the batch size"
                   if epochs else "no full epochs (throughput and memory only; warm-up + timed steps)")
    lr = spec.get("learning_rate")
    policy = spec.get("lr_policy", "fixed")
    lr_text = (f"{spec.get('optimizer', '?')} (momentum {spec.get('momentum', 0)}), learning rate {lr} "
               + ("for every batch size" if policy == "fixed" else
                  f"at batch {spec.get('lr_base_batch')}, scaled "
                  f"{'linearly' if policy == 'linear' else 'by the square root'} "
                  "with the batch size"))
    if variants:  # the top-level settings are only the defaults the variants start from
        lr_text += " (the experiment's default, which the variants below override)"
    repeats = spec.get("repeats", len(_distinct(exp, lambda t: t.settings.repeat)) or 1)
    return (
        f"<b>Workload.</b> Data set {dataset}. Model {model}. Training: {epochs_text}. Optimizer {lr_text}. "
        f"Repeats: {repeats} per framework and batch size "
        f"(seeds {', '.join(map(str, _distinct(exp, lambda t: t.settings.seed))) or '?'}). "
        f"Device: {spec.get('device', '?')}, precision {spec.get('precision', '?')}, "
        f"math mode {spec.get('math_mode', 'not recorded')}.")


def runs_rows(exp: StoredExperiment) -> list[tuple[str, str, str]]:
    """(run id, started at, exact command line) of every run of the experiment."""
    return [(str(r.run_id), str(r.started_at or "-"), str(r.command or "(not recorded)")) for r in exp.runs]


def spec_summary(exp: StoredExperiment) -> dict[str, Any]:
    """The resolved spec, without the long data-set key (printed in the appendix)."""
    spec = dict(exp.spec)
    data = dict(spec.get("data") or {})
    data.pop("key", None)
    if data:
        spec["data"] = data
    return spec


__all__ = ["environment_rows", "had_gpu", "method_paragraphs", "no_gpu_banner", "node_rows",
           "runs_rows", "used_gpu_rows"]
