"""The ``batch_ramp`` study's second phase (issue 52): the ramp B_simple recommends, trained beside the constant sizes.

The study's experiment plans constant sizes only (``batch_sizes``, measuring the gradient noise); once they are
stored, :func:`ramp_trials` reads their ``gradient_noise`` rows back, computes each framework's B_simple along the
training and the ramp it suggests (:func:`harness.noise.along_training`, :func:`harness.noise.ramp_from`: the same
functions ``recommend`` prints them with), and plans that ramp as variant ``ramp`` with the experiment's repeats and
every other setting of its constant trials: its sizes from the schedule, each at the rate ``lr_policy`` gives it,
evaluated every ``target_eval_samples`` samples, no noise measurement (it measures the ramp's time to target, not
B_simple). Resuming recomputes the same ramp from the same stored rows, so the ramp's trials keep their hashes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from harness.config.experiment import Experiment
from harness.config.trial import TrialSpec
from harness.noise import along_training, ramp_from
from harness.store import Store

#: the variant the ramp's trials run as
RAMP_VARIANT = "ramp"


def ramp_trials(exp: Experiment, store: Store, trials: Sequence[TrialSpec], n_train: int
                ) -> tuple[list[TrialSpec], dict[str, str]]:
    """The ramp's trials for every framework whose constant trials (``trials``, stored in ``store``) recommend one,
    and why not for the others (framework -> reason)."""
    ok = {r.trial_hash for r in store.trials("experiment = ? AND status = 'ok'", (exp.name,))}
    out: list[TrialSpec] = []
    why: dict[str, str] = {}
    for framework in exp.frameworks:
        mine = [t for t in trials if t.framework == framework and not t.batch_schedule]
        rows = [r for t in mine if t.trial_hash in ok for r in store.gradient_noise(t.trial_hash)]
        if not rows:
            why[framework] = "no constant-size trial finished with gradient-noise rows"
            continue
        totals = {t.trial_hash: t.epochs * n_train for t in mine}
        fits = [r.answer.max_batch for r in store.maxbatch_answers() if r.framework == framework
                and r.answer.max_batch]  # a search stored before (a resumed run): the ramp stays below it
        ramp, reason = ramp_from(along_training(rows, totals), sorted({t.batch_size for t in mine}),
                                 cap=int(fits[-1]) if fits else None)
        if ramp is None:
            why[framework] = reason
            continue
        schedule = tuple((f, b, exp.lr_for(b)) for f, b in ramp.schedule)
        for template in [t for t in mine if t.batch_size == mine[0].batch_size]:  # one per repeat
            out.append(dataclasses.replace(
                template, variant=RAMP_VARIANT, batch_size=schedule[0][1], batch_schedule=schedule,
                optimizer=dataclasses.replace(template.optimizer, lr=schedule[0][2]), gradient_noise=0,
                eval_every_steps=0, eval_every_samples=exp.target_eval_samples if exp.train_to_target else 0,
                steady_s=0.0))
    return out, why
