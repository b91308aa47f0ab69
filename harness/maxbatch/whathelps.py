"""What helps when a model does not fit (issue 14, item 5): the plain search beside the same search with settings.

``batchscope maxbatch`` with ``--accumulate-steps K`` (K > 1), a ``--precision`` other than fp32, or
``--adapter-option KEY=VALUE`` runs several normal searches, each with its own ``maxbatch`` row: the plain one
(fp32, no accumulation, the adapter's default settings), each kind of setting alone, and, when more than one
kind was given, all of them together. Then one table: the largest micro-batch, the accumulation steps, the
effective batch (micro-batch x steps), the peak memory and the throughput at the answer, and the change
against the plain search.

Everything here is pure (no executor, no store, no framework): :func:`harness.maxbatch.searching.search_each` runs
the searches, and the report may build the same table from stored rows. An adapter class is passed in where one is
needed.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from harness.errors import ConfigError
from harness.records import MaxBatchResult

if TYPE_CHECKING:  # annotations only: the request's module loads the search
    from harness.config.choices import Precision
    from harness.maxbatch.request import MaxBatchRequest

#: the ``setting`` of a search with no setting: fp32, one micro-batch per update, the adapter's defaults
PLAIN = "plain"


def word(value: Any) -> str:
    """A setting's value as the user types it (``true``, ``128``, ``preallocate``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def setting_label(precision: str, accumulate_steps: int, adapter_options: Mapping[str, Any],
                  defaults: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> str:
    """The name of a search's setting: what differs from the plain search, ``plain`` when nothing does.

    ``defaults``: the adapter's default options; an option set to its default is no setting (a sweep passes
    the resolved options, defaults included). ``env``: the environment variables the search's probes were given
    (``--env``), named as the user types them (``MALLOC_MMAP_THRESHOLD_=131072``).
    """
    defaults = defaults or {}
    parts = [f"accumulate_steps={accumulate_steps}"] if accumulate_steps > 1 else []
    if precision != "fp32":
        parts.append(f"precision={precision}")
    parts += [f"{key}={word(value)}" for key, value in sorted(adapter_options.items())
              if key not in defaults or defaults[key] != value]
    parts += [f"{key}={value}" for key, value in sorted((env or {}).items())]
    return " + ".join(parts) or PLAIN


@dataclass(frozen=True)
class Setting:
    """One search of a "what helps" run: its precision, accumulation steps, adapter options and environment."""

    precision: str = "fp32"
    accumulate_steps: int = 1
    adapter_options: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The ``setting`` column of its row."""
        return setting_label(self.precision, self.accumulate_steps, self.adapter_options, env=self.env)


def asks_what_helps(precision: str, accumulate_steps: int, adapter_options: Mapping[str, Any],
                    env: Mapping[str, str] | None = None) -> bool:
    """Whether the command line gave a setting to try (then maxbatch compares it with the plain search)."""
    return precision != "fp32" or accumulate_steps > 1 or bool(adapter_options) or bool(env)


def plan_settings(precision: str, accumulate_steps: int, adapter_options: Mapping[str, Any],
                  include_plain: bool = True, env: Mapping[str, str] | None = None) -> list[Setting]:
    """The searches to run, in order: plain, each kind of setting alone, then all together (if more than one).

    A kind is the accumulation, the precision, or one adapter option: ``--adapter-option a=1 --adapter-option
    b=2`` tries a alone, b alone and both. Every subset would grow as 2^n; alone and together say what each
    does by itself and whether they add up, at n + 2 searches.
    """
    kinds = []
    if accumulate_steps > 1:
        kinds.append(Setting(accumulate_steps=accumulate_steps))
    if precision != "fp32":
        kinds.append(Setting(precision=precision))
    kinds += [Setting(adapter_options={key: value}) for key, value in adapter_options.items()]
    kinds += [Setting(env={key: value}) for key, value in (env or {}).items()]
    combined = [Setting(precision, accumulate_steps, dict(adapter_options), dict(env or {}))] if len(kinds) > 1 else []
    return ([Setting()] if include_plain else []) + kinds + combined


def request_label(req: MaxBatchRequest) -> str:
    """The setting of a search as the command line names it (no adapter defaults: the stored row's may say less)."""
    return setting_label(req.precision, req.accumulate_steps, req.adapter_options, env=req.env)


def setting_requests(req: MaxBatchRequest, adapter_cls: Any, device: str, trial_limit_mib: float,
                     include_plain: bool = True) -> list[MaxBatchRequest]:
    """The requests of a "what helps" run (:func:`plan_settings`: the plain search, each setting alone and all
    together), each ``req`` with one setting. A setting that would not apply on ``device`` (the budget's, with its
    ``trial_limit_mib``) is refused here, before anything is written."""
    check_precision(adapter_cls, req.precision, device)
    check_options_apply(adapter_cls, req.adapter_options, device, trial_limit_mib)
    settings = plan_settings(req.precision, req.accumulate_steps, req.adapter_options, include_plain=include_plain,
                             env=req.env)
    return [replace(req, precision=cast("Precision", s.precision), accumulate_steps=s.accumulate_steps,
                    adapter_options=dict(s.adapter_options), env=dict(s.env)) for s in settings]


#: what a setting is known to cost the throughput of training, measured with repeats (the table's own samples/s
#: comes from one short confirm run); printed under the table when a search used it
KNOWN_COSTS = {
    "MALLOC_MMAP_THRESHOLD_": (
        "MALLOC_MMAP_THRESHOLD_ (a fixed glibc mmap threshold: peaks repeat to the MiB and stop growing over steps) "
        "was measured to cost PyTorch 0.57x of its training throughput on CPU (a bare loop at batch 16: 1,896 -> "
        "1,088 samples/s; a harness trial at batch 64, median of repeats: docs/benchmarks.md); JAX, TensorFlow and "
        "MXNet barely moved. Train with it only if the larger batch is worth that"),
}


def cost_notes(searched: Sequence[Searched]) -> list[str]:
    """The measured costs (KNOWN_COSTS) of the environment settings the searches used, once each."""
    used = {key for s in searched for key in KNOWN_COSTS if f"{key}=" in s.setting}
    return [KNOWN_COSTS[key] for key in KNOWN_COSTS if key in used]


# ---------------------------------------------------------------- checks in the parent, before anything runs
def check_precision(adapter_cls: Any, precision: str, device: str) -> None:
    """Refuse ``precision`` where the adapter does not run it on ``device`` (``cpu`` or ``gpu``).

    ``Adapter.validate_precision`` takes the precision alone today; once it also takes the device (mixed
    precision runs on a GPU only), the device is passed, found by the parameter's name, so this call needs no
    change.
    """
    if "device" in inspect.signature(adapter_cls.validate_precision).parameters:
        adapter_cls.validate_precision(precision, device=device)
    else:
        adapter_cls.validate_precision(precision)


def check_options_apply(adapter_cls: Any, options: Mapping[str, Any], device: str, memory_limit_mib: float) -> None:
    """Refuse an adapter option that would change nothing where the search runs (TensorFlow's ``memory_mode``
    on a CPU, or under an emulated smaller GPU, whose cap replaces it): the row would name a setting that was
    not applied, and the table would call its answer what that setting gives."""
    without = getattr(adapter_cls, "options_without_effect", None)
    inert = without(options, device, memory_limit_mib) if without is not None else {}
    if inert:
        key, why = next(iter(inert.items()))
        raise ConfigError(f"--adapter-option {key}={word(options[key])} changes nothing here: {why}; leave it out")


# ---------------------------------------------------------------- the table
@dataclass(frozen=True)
class Searched:
    """One search of the run as the table shows it: its stored row, or why it has none."""

    setting: str
    accumulate_steps: int
    row: MaxBatchResult | None  # the stored answer (max_batch 0: not even a micro-batch of 1 fits)
    problem: str = ""  # why there is no row (the search aborted)


#: (key, header, left-aligned) of the table's columns
TABLE_COLUMNS = (
    ("setting", "setting", True), ("micro", "largest micro-batch", False), ("k", "accumulate steps", False),
    ("effective", "effective batch", False), ("peak", "peak MiB at answer", False),
    ("speed", "samples/s at answer", False), ("per_sample", "ms/sample", False), ("change", "change vs plain", True),
)


def _pct(new: float, old: float) -> str:
    change = (new / old - 1.0) * 100.0
    return "±0%" if round(change) == 0 else f"{change:+.0f}%"


def _change(row: MaxBatchResult, plain: MaxBatchResult | None) -> str:
    if plain is None or row is plain:
        return "-" if plain is None else "(reference)"
    parts = []
    micro, base_micro = row.answer.max_batch, plain.answer.max_batch
    if (row.accumulate_steps or 1) > 1 and micro and base_micro:  # without accumulation micro = effective
        parts.append(f"micro-batch {_pct(micro, base_micro)}")
    eff, base = row.answer.effective_batch, plain.answer.effective_batch
    if eff is not None and base:
        parts.append(f"effective batch x{eff / base:.2f}")
    elif eff and not base:
        parts.append("fits where plain does not")
    speed, base_speed = row.answer.samples_per_s, plain.answer.samples_per_s
    if speed and base_speed:
        parts.append(f"samples/s {_pct(speed, base_speed)}")
    peak, base_peak = row.answer.peak_mib, plain.answer.peak_mib
    if peak is not None and base_peak:
        parts.append(f"peak {_pct(peak, base_peak)}")
    return ", ".join(parts) or "-"


def table_rows(searched: Sequence[Searched]) -> list[dict[str, str]]:
    """One row per search (columns: :data:`TABLE_COLUMNS`), the change measured against the plain search."""
    plain = next((s.row for s in searched if s.setting == PLAIN and s.row is not None), None)
    out = []
    for s in searched:
        row = s.row
        cells = {"setting": s.setting, "k": str(s.accumulate_steps)}
        if row is None:
            why = textwrap.shorten(s.problem, 60, placeholder=" …")  # in full on stderr, above the table
            out.append(cells | {"micro": f"aborted: {why}", "effective": "-", "peak": "-", "speed": "-",
                                "per_sample": "-", "change": "-"})
            continue
        micro = int(row.answer.max_batch or 0)
        speed = row.answer.samples_per_s
        peak = row.answer.peak_mib
        capped = "+" if row.answer.capped else ""
        out.append(cells | {
            "micro": f"{micro}{capped}" if micro else "0 (not even 1)",
            "effective": f"{micro * s.accumulate_steps}{capped}" if micro else "-",
            "peak": "-" if peak is None else f"{float(peak):.0f}",
            "speed": "-" if not speed else f"{float(speed):.0f}",
            "per_sample": "-" if not speed else f"{1000.0 / float(speed):.3g}",
            "change": _change(row, plain),
        })
    return out


def render_table(rows: Sequence[Mapping[str, str]]) -> list[str]:
    """The rows of :func:`table_rows` as aligned text lines, the header first: words left, numbers right."""
    cells = [[header for _, header, _ in TABLE_COLUMNS]] + [[r.get(key, "-") for key, _, _ in TABLE_COLUMNS]
                                                            for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE_COLUMNS))]
    return ["  ".join(c.ljust(w) if left else c.rjust(w)
                      for c, w, (_, _, left) in zip(line, widths, TABLE_COLUMNS, strict=True)).rstrip()
            for line in cells]


TABLE_NOTE = (
    "largest micro-batch: what fits in memory at once; effective batch: micro-batch x accumulate steps, the "
    "samples per optimizer update. Peak: the largest peak measured at the answer (its probe and confirm run), in "
    "the budget's units. Samples/s: the confirm run at the answer (every sample of the update counted, "
    "preparation excluded), a short run: a rough figure, not a benchmark. '+': every size up to "
    "--max-batch-cap fits."
)
