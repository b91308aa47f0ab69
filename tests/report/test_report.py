"""The PDF report, built from a real CPU sweep and from a clearly made-up GPU replay (tests/report_fixtures.py).

Checked: the PDF opens and has its sections, every drawn figure has data, the tables' numbers are the
store's, the no-GPU banner appears only where there was no GPU, the max-batch row is printed, no
framework is imported, and bad input ends in a clear message (exit 2), never a traceback or empty PDF.
"""

from __future__ import annotations

import csv
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pypdf import PdfReader

from harness.cells import cells
from harness.registry import framework_modules
from harness.store import Store
from harness.store.maxbatch_row import maxbatch_record
from report.document import figures as report_figures
from report.document.build import build_report
from report.load import load
from tests import ROOT
from tests.fakes.report_store import GPU_EXPERIMENT, GPU_OOM, MADE_UP, make_cpu_store, make_gpu_replay_store
from tests.helpers.inprocess import cli
from tests.helpers.recommend_rows import recompute

SECTIONS = ("Runs and exact command lines", "Environment", "Method", "Findings", "Figures", "Tables",
            "Appendix: resolved experiment specifications")
#: every registered adapter's framework modules (a fifth adapter's framework is covered once it is registered)
FRAMEWORK_MODULES = tuple(sorted(framework_modules()))


@pytest.fixture(scope="session")
def cpu_dir(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    return make_cpu_store(tmp_path_factory.mktemp("cpu_run"), cache_dir)


@pytest.fixture(scope="session")
def gpu_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gpu_replay_store(tmp_path_factory.mktemp("gpu_replay"))


def _text(pdf: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in PdfReader(pdf).pages)


def _flat(text: str) -> str:
    return " ".join(text.split())


_ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``batchscope report ARGS`` called in the test process (tests/helpers/inprocess.py)."""
    return cli(["report", *args], cwd=ROOT, env=_ENV)


@pytest.fixture(scope="session")
def cpu_report(cpu_dir: Path) -> tuple[Path, str]:
    result = build_report(cpu_dir)
    return result.pdf, _text(result.pdf)


@pytest.fixture(scope="session")
def gpu_report(gpu_dir: Path) -> tuple[Path, str]:
    result = build_report(gpu_dir)
    return result.pdf, _text(result.pdf)


@pytest.mark.slow
def test_cpu_report_opens_has_every_section_and_the_no_gpu_banner(cpu_report: tuple[Path, str]) -> None:
    pdf, text = cpu_report
    assert len(PdfReader(pdf).pages) >= 3
    for heading in SECTIONS:
        assert heading in text, heading
    flat = _flat(text)
    assert "This run had no GPU" in flat
    assert "pytest tests/test_report.py (real CPU sweep)" in flat  # the exact command line is printed
    assert "pytorch's step throughput was highest at batch" in flat  # a finding worded from the data
    assert "accuracy peaks at batch" in flat
    assert "no complete resolved specification" not in flat  # a real run stores its resolved spec


def test_gpu_replay_report_has_no_banner_and_says_it_is_made_up(gpu_report: tuple[Path, str]) -> None:
    _, text = gpu_report
    flat = _flat(text)
    assert "This run had no GPU" not in flat
    assert "MADE-UP test fixture" in flat  # a reader cannot take the replay for a measurement
    assert "ReplayGPU (made-up)" in flat
    assert "Largest batch that fits" in flat


@pytest.mark.slow
def test_every_drawn_figure_has_data(cpu_dir: Path, gpu_dir: Path) -> None:
    drawn: dict[str, set[str]] = {}
    for directory in (cpu_dir, gpu_dir):
        for exp in load(directory).experiments:
            results = report_figures.build_figures(exp, cells(exp.trials, exp.frameworks))
            for fig in results:
                if fig.figure is None:
                    assert fig.absent_reason, fig.key  # an absent figure always says why
                    continue
                for ax in fig.figure.axes:
                    data_lines = [ln for ln in ax.get_lines() if np.asarray(ln.get_xdata()).size > 1]
                    assert data_lines, (exp.name, fig.key, ax.get_title())
                    ys = [float(y) for ln in data_lines for y in np.asarray(ln.get_ydata(), dtype=float)]
                    assert all(y == y for y in ys) and any(y != 0 for y in ys), (exp.name, fig.key)
                drawn.setdefault(exp.name, set()).add(fig.key)
                report_figures.plt.close(fig.figure)
    assert {"throughput", "accuracy", "host"} <= drawn["cpu_digits"]
    assert {"throughput", "gpu_util", "gpu_memory", "energy", "host"} <= drawn[GPU_EXPERIMENT]


def test_gpu_figures_mark_the_oom_size_and_draw_the_published_points(gpu_dir: Path) -> None:
    from report.answer.thesis import load_reference

    (exp,) = load(gpu_dir).experiments
    results = {f.key: f for f in report_figures.build_figures(exp, cells(exp.trials, exp.frameworks),
                                                              load_reference())}
    util = results["gpu_util"].figure
    assert util is not None
    texts = [t.get_text() for t in util.axes[0].texts]
    assert "oom" in texts  # tensorflow at 256 is marked on the axis
    ref_points = [ln for ln in util.axes[0].get_lines() if ln.get_marker() == "D"]
    assert ref_points  # the thesis's GPU utilisation at 8/32/128 is drawn
    for f in results.values():
        if f.figure is not None:
            report_figures.plt.close(f.figure)


def test_reference_memory_is_taken_as_given_in_mib() -> None:
    from report.answer.thesis import load_reference

    ref = load_reference()
    mem = report_figures._reference_for(ref, "proc_gpu_mem_peak_mib")
    expected = [r for r in ref if r["metric"] == "gpu_mem_mib"]
    assert mem and [r["value"] for r in mem] == [r["value"] for r in expected]
    acc = report_figures._reference_for(ref, "accuracy_pct")
    assert [r["value"] for r in acc] == [r["value"] for r in ref if r["metric"] == "accuracy_pct"]
    assert report_figures._reference_for(ref, "step_samples_per_s") == []


@pytest.mark.slow
def test_headline_csv_matches_the_store(cpu_dir: Path, gpu_dir: Path, cpu_report: tuple[Path, str],
                                        gpu_report: tuple[Path, str]) -> None:
    for directory, (pdf, _) in ((cpu_dir, cpu_report), (gpu_dir, gpu_report)):
        (csv_path,) = (pdf.parent / "tables").glob("*-headline.csv")
        with open(csv_path, newline="", encoding="utf-8") as f:
            rows = {(r["framework"], int(r["batch_size"])): r for r in csv.DictReader(f)}
        conn = sqlite3.connect(directory / "results.sqlite")
        sql = ("SELECT framework, batch_size, COUNT(*), SUM(status = 'ok'), "
               "AVG(CASE WHEN status = 'ok' THEN step_samples_per_s END), "
               "AVG(CASE WHEN status = 'ok' THEN rss_peak_mib END), "
               "AVG(CASE WHEN status = 'ok' THEN gpu_util_pct END) "
               "FROM trials WHERE purpose = 'sweep' GROUP BY framework, batch_size")
        stored = conn.execute(sql).fetchall()
        conn.close()
        assert len(stored) == len(rows)
        for fw, bs, n, n_ok, speed, rss, util in stored:
            row = rows[(fw, bs)]
            assert int(row["trials_n"]) == n and int(row["ok_n"]) == n_ok
            for value, column in ((speed, "step_samples_per_s_mean"), (rss, "rss_peak_mib_mean"),
                                  (util, "gpu_util_pct_mean")):
                if value is None:
                    assert row[column] == ""
                else:
                    assert float(row[column]) == pytest.approx(value, rel=1e-9)


@pytest.mark.slow
def test_the_printed_table_shows_the_store_mean(cpu_dir: Path, cpu_report: tuple[Path, str]) -> None:
    conn = sqlite3.connect(cpu_dir / "results.sqlite")
    stored = conn.execute("SELECT batch_size, AVG(step_samples_per_s) FROM trials GROUP BY batch_size").fetchall()
    conn.close()
    flat = _flat(cpu_report[1])
    for _, speed in stored:
        assert f"{speed:.0f} ±" in flat


def test_maxbatch_table_shows_the_stored_row(gpu_dir: Path, gpu_report: tuple[Path, str]) -> None:
    with Store.open(gpu_dir, create=False) as store:
        (row,) = store.maxbatch_results()
    flat = _flat(gpu_report[1])
    assert f"{row['budget_mib']:.0f} MiB gpu-card" in flat
    assert str(row["max_batch"]) in flat and f"pow2 {row['recommended_pow2']}" in flat
    from harness.maxbatch.advice import answer_headroom_mib

    spare = answer_headroom_mib(maxbatch_record(row))
    assert spare is not None and f"{spare:.1f} MiB" in flat  # the memory the answer leaves unused
    (csv_path,) = (gpu_report[0].parent / "tables").glob("*-maxbatch.csv")
    with open(csv_path, newline="", encoding="utf-8") as f:
        (stored,) = list(csv.DictReader(f))
    assert int(stored["max_batch"]) == row["max_batch"] and stored["strategy"] == row["strategy"]
    # where the search stopped: its resolution, beside the strategy in the table and in the CSV
    assert row["resolution"] and f"{row['strategy']}, {row['resolution']}" in flat
    assert stored["resolution"] == row["resolution"]


@pytest.mark.slow
def test_thesis_verdicts_end_with_one_full_stop(cpu_report: tuple[Path, str], gpu_report: tuple[Path, str]) -> None:
    from report.answer.findings import thesis_verdicts

    (done,) = thesis_verdicts([{"finding": "F", "holds": True, "evidence": "ours 1.0. theirs 2.0."}])
    assert done.text == "F: holds on this run (ours 1.0. theirs 2.0)."
    (bare,) = thesis_verdicts([{"finding": "G", "holds": None, "evidence": ""}])
    assert bare.text == "G: cannot be judged on this run."
    for _, text in (cpu_report, gpu_report):
        flat = _flat(text)
        assert "holds on this run" in flat or "cannot be judged on this run" in flat
        assert ".)." not in flat and ".." not in flat.replace("...", "")


@pytest.mark.process
def test_a_rebuild_in_a_fresh_process_imports_no_framework_and_removes_stale_files(
        gpu_dir: Path, gpu_report: tuple[Path, str], tmp_path: Path) -> None:
    # rebuild over a copy of the first build, with files an older build would have left behind
    out = tmp_path / "rep"
    shutil.copytree(gpu_report[0].parent, out)
    before = sorted(p.name for p in (out / "figures").iterdir())
    stale_fig = out / "figures" / "old-experiment-01-throughput.png"
    stale_csv = out / "tables" / "old-experiment-headline.csv"
    mine = out / "notes.txt"
    for p in (stale_fig, stale_csv, mine):
        p.write_text("old")
    code = ("import sys; from report.document.build import build_report; "
            f"build_report({str(gpu_dir)!r}, {str(out / 'report.pdf')!r}); "
            f"print(sorted(m for m in {FRAMEWORK_MODULES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"  # no framework was imported to build the report
    assert (out / "report.pdf").stat().st_size > 10_000
    assert not stale_fig.exists() and not stale_csv.exists()
    assert mine.exists()  # a file the report did not write is never touched
    assert sorted(p.name for p in (out / "figures").iterdir()) == before


# ---------------------------------------------------------------- bad input, through the CLI
def _assert_clear_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "batchscope: error:" in done.stderr
    for w in words:
        assert w in done.stderr, done.stderr


def test_cli_refuses_a_directory_without_a_store(tmp_path: Path) -> None:
    done = _cli(str(tmp_path))
    _assert_clear_refusal(done, "no results store", "batchscope run")
    assert not (tmp_path / "report").exists()


def test_cli_refuses_an_empty_store(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    done = _cli(str(tmp_path))
    _assert_clear_refusal(done, "holds no trial")
    assert not list(tmp_path.rglob("*.pdf"))


def test_cli_refuses_an_older_schema(gpu_dir: Path, tmp_path: Path) -> None:
    shutil.copy(gpu_dir / "results.sqlite", tmp_path / "results.sqlite")
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    with conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    conn.close()
    _assert_clear_refusal(_cli(str(tmp_path)), "older batchscope", "schema 0")


def test_cli_refuses_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "results.sqlite").write_text("this is not SQLite")
    _assert_clear_refusal(_cli(str(tmp_path)), "results.sqlite")


@pytest.mark.process
def test_cli_all_trials_failed_gives_a_report_that_says_so(tmp_path: Path) -> None:
    from harness.records import TrialOutcome
    from tests.fakes.report_store import _gpu_trial

    with Store.open(tmp_path) as store:
        run_id = store.begin_run(GPU_EXPERIMENT, {"name": GPU_EXPERIMENT, "frameworks": ["tensorflow"]},
                                 f"({MADE_UP})", {"gpu_note": MADE_UP})
        for batch, status, reason in ((8, "crashed", "killed by SIGSEGV in phase timed (made-up)"),
                                      (GPU_OOM[1], "oom", "MemoryError (made-up)")):
            store.write_trial(TrialOutcome(trial=_gpu_trial("tensorflow", batch, 0), status=status, reason=reason),
                              run_id, {"gpu_note": MADE_UP})
    out = tmp_path / "failed.pdf"
    # a process of its own, to see what it imported: a report that draws no figure imports neither seaborn nor
    # scipy (1.5 s of scipy.stats at every start-up otherwise: issue 42)
    code = ("import json, sys\nfrom harness.cli import main\n"
            f"code = main(['report', {str(tmp_path)!r}, '-o', {str(out)!r}])\n"
            "print(json.dumps(sorted(m for m in ('seaborn', 'scipy') if m in sys.modules)))\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_ENV,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    flat = _flat(_text(out))
    assert "No trial of this experiment finished" in flat
    assert "killed by SIGSEGV" in flat and "What happened to each trial" in flat
    assert "not drawn:" in done.stdout  # the CLI says which figures are missing and why
    assert "The thesis's findings on this run" not in flat  # nothing to judge when nothing finished
    assert "no complete resolved specification" in flat  # the "?" of a hand-made spec are explained


def test_cli_refuses_an_output_that_is_not_a_pdf(gpu_dir: Path, tmp_path: Path) -> None:
    _assert_clear_refusal(_cli(str(gpu_dir), "-o", str(tmp_path / "report.txt")), ".pdf")


@pytest.mark.slow
def test_page_one_leads_with_a_recommendation_recomputed_from_the_store(
        cpu_dir: Path, cpu_report: tuple[Path, str], gpu_dir: Path, gpu_report: tuple[Path, str]) -> None:
    for store_dir, (pdf, _) in ((cpu_dir, cpu_report), (gpu_dir, gpu_report)):
        page1 = _flat(PdfReader(pdf).pages[0].extract_text() or "")
        assert "The answer: which batch size to train with" in page1
        assert "The answer: training time to the target accuracy, and throughput" in page1  # the figure is on page 1
        # the documented rule, in plain SQL on the curve rows (tests/helpers/recommend_rows.py); the GPU replay trained
        # no epochs, so it has no accuracy, no target and no answer
        expected = {fw: e["batch"] for fw, e in recompute(store_dir).items()}
        for framework, batch in expected.items():
            if batch is not None:
                assert re.search(rf"\b{framework} {batch}\b", page1), (framework, batch, page1[:1500])
        with open(pdf.parent / "tables" / f"{load(store_dir).experiments[0].name}-recommendation.csv") as f:
            stored = {r["framework"]: int(r["recommended_batch"]) if r["recommended_batch"] else None
                      for r in csv.DictReader(f)}
        assert {fw: b for fw, b in stored.items() if fw in expected} == expected
        if store_dir == gpu_dir:
            assert set(stored.values()) == {None} and "no accuracy to reach" in page1
    gpu_page1 = _flat(PdfReader(gpu_report[0]).pages[0].extract_text() or "")
    assert "J/sample" in gpu_page1  # energy per sample where there was a (replayed) GPU
    assert "J/sample" not in _flat(PdfReader(cpu_report[0]).pages[0].extract_text() or "")


def test_the_environment_table_says_which_allocator_settings_the_cpu_workers_ran_with():
    # issue 22: the run records what its workers ran with, and the report says it, old runs included
    from report.document.context import cpu_worker_env_words

    assert cpu_worker_env_words({"cpu_worker_env": {}}).startswith("none: glibc's and the frameworks' defaults")
    assert cpu_worker_env_words({"cpu_worker_env": {"MALLOC_MMAP_THRESHOLD_": "131072"}}) == \
        "MALLOC_MMAP_THRESHOLD_=131072"
    assert "not recorded" in cpu_worker_env_words({})


def test_the_method_says_which_frameworks_step_times_are_means_over_windows_of_queued_steps() -> None:
    """Issue 40: an MXNet trial's steps are timed over windows of queued steps; the Timing paragraph says so, and
    says nothing where every trial read its clock after every step (1) or predates the column (None)."""
    from types import SimpleNamespace

    from report.document.context import _queued_steps_text

    def exp(*rows: tuple[str, int | None]) -> SimpleNamespace:  # a stored trial reads as its row
        return SimpleNamespace(trials=[{"framework": fw, "status": "ok", "step_clock_window": w} for fw, w in rows])

    assert _queued_steps_text(exp(("pytorch", 1), ("jax", None))) == ""
    text = _queued_steps_text(exp(("pytorch", 1), ("mxnet", 10), ("mxnet", 4), ("mxnet", None)))
    assert "mxnet: up to 10 steps" in text and "pytorch" not in text and "window means" in text


def test_the_method_says_which_host_peaks_leave_the_compilers_memory_out() -> None:
    """A JAX trial that read its step back from the persistent cache holds less host memory than one that compiled
    (901 against 662 MiB at deep_cnn 66): the Memory paragraph names them, and says when one framework has both."""
    from types import SimpleNamespace

    from report.document.context import _compile_cache_memory_text

    def exp(*rows: tuple[str, str | None]) -> SimpleNamespace:
        return SimpleNamespace(trials=[SimpleNamespace(settings=SimpleNamespace(framework=fw),
                                                       metrics=SimpleNamespace(compile_cache=c)) for fw, c in rows])

    assert _compile_cache_memory_text(exp(("jax", "cold"), ("pytorch", None))) == ""
    only_warm = _compile_cache_memory_text(exp(("jax", "warm"), ("jax", "warm"), ("pytorch", None)))
    assert "2 trial(s) (jax)" in only_warm and "not like for like" not in only_warm
    mixed = _compile_cache_memory_text(exp(("jax", "warm"), ("jax", "cold"), ("tensorflow", "off")))
    assert "Here jax also has trials that compiled" in mixed and "tensorflow" not in mixed


@pytest.mark.parametrize("bullets", [3, 60])
def test_the_measurements_start_on_a_new_page_unless_the_answer_spilled_onto_one(tmp_path: Path, bullets: int) -> None:
    """The answer page ends with a page break, but an answer whose last lines ran onto page 2 is followed there by
    the measurements, not by a page holding only those lines (a make-quick report had such a page)."""
    from report.document.pdf import PdfWriter

    pdf = PdfWriter("t", "footer")
    began = pdf.mark_page()
    pdf.heading("The answer", 0)
    pdf.bullets([f"answer line {i} " + "words " * 20 for i in range(bullets)])
    pdf.new_page_unless_spilled(began)
    pdf.heading("NEXT SECTION", 0)
    pdf.save(tmp_path / "t.pdf")
    pages = [page.extract_text() or "" for page in PdfReader(tmp_path / "t.pdf").pages]
    on = [i + 1 for i, text in enumerate(pages) if "NEXT SECTION" in text]
    spilled_to = max(i + 1 for i, text in enumerate(pages) if "answer line" in text)
    assert (spilled_to == 1) == (bullets == 3)  # 60 bullets of two lines run past page 1
    assert on == [2 if spilled_to == 1 else spilled_to]  # a new page, or on the page the answer ended on
