"""The max-batch search as one object (issue 39): built once from the request, the budget, the data and the model
description, run against a store, reporting to a listener with typed messages, as the sweep does
(:func:`harness.run.sweep.run_sweep` and :class:`harness.run.listener.SweepListener`).

``batchscope maxbatch`` (harness/cli/maxbatch.py) parses the command line into a
:class:`~harness.maxbatch.request.MaxBatchRequest` (checked once, there), builds the search with
:meth:`MaxBatchSearch.build`, prints its forecast, calls :meth:`MaxBatchSearch.run` with its printer as the listener,
and prints the answer; a sweep with ``max_batch = true`` (harness/pipeline.py) builds one per framework, with the
sweep's data, and on Ray one per node, whose probes and answer the driver stores.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.data import DataRequest, PreparedData, default_cache_dir, prepare
from harness.envs.runtime import FrameworkRuntime, unchecked_runtime
from harness.errors import ConfigError, DoesNotFitError, SearchAborted
from harness.maxbatch.advice import answer_env, cap_skips_settling, glibc_heap_varies
from harness.maxbatch.answer import ModelSize, Provenance, answer_record, settled, verified
from harness.maxbatch.budget import Budget, resolve_budget
from harness.maxbatch.listener import Bracket, MaxBatchListener
from harness.maxbatch.probes import WorkerProber, does_not_fit_message, probe_peak_mib, search_settings, settle_heap
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import SearchResult, SearchSettings, search
from harness.maxbatch.whathelps import Searched, request_label
from harness.models import ModelDescription, build_description, is_native_model
from harness.records import MaxBatchResult, Monitor, TrialOutcome, TrialUnit
from harness.run.executor import LocalExecutor

if TYPE_CHECKING:  # annotations only
    from harness.store import Store


@dataclass(frozen=True)
class DataSource:
    """Where the request's data set is prepared from: ``data_dir`` a local copy of a downloadable set, ``layout`` an
    npz file's image layout (``auto``: from its channel axis), ``cache_dir`` the prepared sets' cache (None: the
    default)."""

    data_dir: str | None = None
    layout: str = "auto"
    cache_dir: Path | None = None

    def prepare(self, req: MaxBatchRequest) -> PreparedData:
        """The data set ``req`` names, prepared (downloaded, checked, cached) for the probes."""
        return prepare(DataRequest(name=req.dataset, seed=req.seed, train_samples=req.train_samples,
                                   synthetic_shape=req.synthetic_shape, synthetic_classes=req.synthetic_classes,
                                   synthetic_samples=req.synthetic_samples, data_dir=self.data_dir,
                                   layout=self.layout), self.cache_dir or default_cache_dir())


@dataclass
class MaxBatchOutcome:
    """Everything a search produced (the stored answer plus the objects behind it)."""

    request: MaxBatchRequest
    budget: Budget
    result: SearchResult
    row: MaxBatchResult
    outcomes: list[TrialOutcome]


@dataclass(frozen=True)
class MaxBatchSearch:
    """One max-batch search, resolved: the request (checked when it was made), the framework's runtime (its adapter
    and the interpreter every probe runs in: the managed environment or the user's ``--python``), the budget it runs
    under, the prepared data and the model's description (None for a native model: the framework's own, no
    description). Made once by :meth:`build`; a "what helps" run makes one per setting with :meth:`with_request`
    (same runtime, budget, data and model). It pickles: on Ray the whole search travels to a node as this value.

    ``env``: the machine (harness.monitor.environment.capture), stored with every probe and the answer.
    """

    request: MaxBatchRequest
    runtime: FrameworkRuntime
    budget: Budget
    data: PreparedData
    description: ModelDescription | None
    env: Mapping[str, Any] = field(default_factory=dict)
    log_dir: Path | None = None
    monitor_factory: Callable[[TrialUnit], Monitor] | None = None
    #: how to search, where not the request's own under the budget (:attr:`settings`): a benchmark's or a test's
    settings_asked: SearchSettings | None = None

    @classmethod
    def build(cls, req: MaxBatchRequest, env: Mapping[str, Any], *, runtime: FrameworkRuntime | None = None,
              budget: Budget | None = None, data: PreparedData | DataSource | None = None,
              log_dir: Path | None = None, monitor_factory: Callable[[TrialUnit], Monitor] | None = None
              ) -> MaxBatchSearch:
        """Resolve the budget on ``env``'s GPUs (refusing one that cannot be enforced; ``budget``: resolved already,
        by a caller that checked the request against it first), prepare the data (``data``: a sweep's, or where to
        find it; by default the request's own) and describe the model for it (a model that does not fit the input is
        refused): nothing is written yet. ``runtime``: the framework as the command resolved it (the command line
        and the pipeline always give it; without one, a test's or a benchmark's, the request's ``python`` unchecked
        or this interpreter)."""
        runtime = runtime or unchecked_runtime(req.framework, req.python)
        req.check_adapter(runtime.adapter_class)  # refused before the budget, the data or anything is written
        budget = budget if budget is not None else resolve_budget(req, list(env.get("gpus") or []), runtime)
        if not isinstance(data, PreparedData):
            data = (data or DataSource()).prepare(req)
        desc = None if is_native_model(req.model) else build_description(req.model, data.input_shape, data.classes)
        return cls(req, runtime, budget, data, desc, env, log_dir, monitor_factory)

    def with_request(self, req: MaxBatchRequest) -> MaxBatchSearch:
        """The same search under another setting of the same model, data and budget ("what helps"), the setting
        checked against the runtime's adapter as :meth:`build` checks its request."""
        return replace(self, request=req.check_adapter(self.runtime.adapter_class))

    @property
    def settings(self) -> SearchSettings:
        """How the request is searched under the budget (strategy, resolution, censoring)."""
        return self.settings_asked or search_settings(self.request, self.budget, self.runtime)

    def run(self, store: Store, run_id: int, listener: MaxBatchListener | None = None) -> MaxBatchOutcome:
        """Search, store every probe (trials, purpose ``probe``) and the answer (maxbatch), and return them; settle the
        recommendation under glibc's default malloc and verify it where asked.

        Raises:
            DoesNotFitError: not even batch size 1 fits (the answer is stored first, max_batch 0).
            SearchAborted: a probe failed twice for a reason other than memory (its probes are stored).
        """
        req, budget, heard = self.request, self.budget, listener or MaxBatchListener()
        env = dict(self.env)

        def record(outcome: TrialOutcome) -> None:
            store.write_trial(outcome, run_id, env)
            heard.on_probe_complete(outcome)

        prober = WorkerProber(req, budget, self.data, LocalExecutor(monitor_factory=self.monitor_factory,
                                                                    log_dir=self.log_dir),
                              on_outcome=record, on_event=heard.on_probe_message if listener is not None else None,
                              runtime=self.runtime)
        result = search(prober, self.settings, lambda probe, lo, hi: heard.on_bracket(Bracket(probe, lo, hi)))
        row = answer_record(req, budget, result, prober.outcomes, self._model_size(prober.outcomes),
                            Provenance(run_id, env, answer_env(prober.env, dict(os.environ))),
                            self.runtime.adapter_class)
        train_env = row.recommendation.train_env or {}
        if glibc_heap_varies(budget.kind, train_env) and row.recommendation.batch and not cap_skips_settling(row):
            row = settled(row, settle_heap(prober, row.recommendation.batch, req.settle_steps), req.settle_steps)
        if req.verify_steps and row.recommendation.batch:
            outcome = prober.verify(row.recommendation.batch, req.verify_steps)
            row = verified(row, outcome, probe_peak_mib(outcome, budget.kind))
        store.write_maxbatch(row)
        if result.max_batch == 0:
            raise DoesNotFitError(does_not_fit_message(req, budget, result.first_fail))
        return MaxBatchOutcome(req, budget, result, row, prober.outcomes)

    def _model_size(self, outcomes: list[TrialOutcome]) -> ModelSize:
        """The model's size from its description; a native model's parameters from the probes (the framework's
        count), with no analytic activation size to forecast with."""
        if self.description is not None:
            return ModelSize(self.description.param_count(), self.description.activation_floats_per_sample())
        return ModelSize(next((o.param_count for o in outcomes if o.param_count), 0))


def search_each(searches: Sequence[MaxBatchSearch], store: Store, run_id: int,
                listener: MaxBatchListener | None = None) -> list[Searched]:
    """The searches of a "what helps" run, one after another: each one's answer, or why it has none. A setting under
    which not even a micro-batch of 1 fits is an answer there (its row is stored, max_batch 0), and an aborted search
    does not stop the others."""
    heard = listener or MaxBatchListener()
    done = []
    for i, one in enumerate(searches):
        req = one.request
        label = request_label(req)
        heard.on_search_start(i, len(searches), label)
        try:
            done.append(Searched(label, req.accumulate_steps, one.run(store, run_id, listener).row))
        except DoesNotFitError as e:  # the search stored its row (max_batch 0) before saying so: the last of this run
            done.append(Searched(label, req.accumulate_steps, store.maxbatch_answers("run_id = ?", (run_id,))[-1],
                                 problem=str(e)))
        except SearchAborted as e:
            done.append(Searched(label, req.accumulate_steps, None, problem=str(e)))
    return done




@dataclass(frozen=True)
class MaxBatchPlan:
    """What one ``maxbatch`` command runs, resolved before anything is written: one search per setting (the runtime,
    the budget, the data and the model's description resolved once and shared), compared when there are several
    ("what helps": :mod:`harness.maxbatch.whathelps`). :meth:`build` refuses what cannot run (ConfigError, exit 2);
    :meth:`run` runs it against a store."""

    searches: tuple[MaxBatchSearch, ...]
    compare: bool
    #: each search's setting as the command line names it (:func:`~harness.maxbatch.whathelps.request_label`)
    labels: tuple[str, ...]

    @classmethod
    def build(cls, req: MaxBatchRequest, runtime: FrameworkRuntime, env: Mapping[str, Any], *, data: DataSource,
              log_dir: Path | None = None, include_plain: bool = True) -> MaxBatchPlan:
        """The budget on ``env``'s GPUs (refused where it cannot be enforced), the math mode where it cannot apply,
        each setting to try (refused where it would change nothing on the budget's device), then the search:
        ``req`` checked against ``runtime``'s adapter, its data prepared and its model described (a model that does
        not fit the input is refused). ``include_plain``: with settings to try, the plain search first."""
        from harness.gpu_peaks import refuse_tf32_without_units
        from harness.maxbatch.whathelps import asks_what_helps, request_label, setting_requests

        gpus = list(env.get("gpus") or [])
        budget = resolve_budget(req, gpus, runtime)
        refuse_tf32_without_units([req.math_mode], gpus, "--math-mode")
        compare = asks_what_helps(req.precision, req.accumulate_steps, req.adapter_options, req.env)
        if not include_plain and not compare:
            raise ConfigError("--no-plain applies only with a setting to try (--accumulate-steps K > 1, --precision "
                              "other than fp32, --adapter-option, --env); add one or leave --no-plain out")
        reqs = (setting_requests(req, runtime.adapter_class, budget.device, budget.trial_limit_mib,
                                 include_plain=include_plain) if compare else [req])
        labels = tuple(request_label(r) for r in reqs)
        search = MaxBatchSearch.build(req, env, runtime=runtime, budget=budget, data=data, log_dir=log_dir)
        return cls(tuple(search.with_request(r) for r in reqs), compare, labels)

    @property
    def first(self) -> MaxBatchSearch:
        """The first search (the plain one, unless left out): its budget, data and description are every search's."""
        return self.searches[0]

    def run_in(self, out: Path, listener: MaxBatchListener, command: str, args: Mapping[str, Any]) -> list[Searched]:
        """Every search, in order, stored in ``out`` (made here, locked and opened once; the run recorded with the
        ``command`` and its ``args``): :meth:`run`."""
        from harness.store import Store
        from harness.store.db import make_out_dir
        from harness.store.lock import locked_out_dir

        make_out_dir(out)
        with listener, locked_out_dir(out), Store.open(out) as store:
            run_id = store.begin_run(self.first.request.experiment, dict(args), command, dict(self.first.env))
            return self.run(store, run_id, listener)

    def run(self, store: Store, run_id: int, listener: MaxBatchListener | None = None) -> list[Searched]:
        """Every search, in order. Compared: each one's answer or why it has none (:func:`search_each`). One search:
        its answer; DoesNotFitError (exit 3) and SearchAborted (exit 1) are the command's."""
        if self.compare:
            return search_each(self.searches, store, run_id, listener)
        return [Searched(self.labels[0], self.first.request.accumulate_steps,
                         self.first.run(store, run_id, listener).row)]
