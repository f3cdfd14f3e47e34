"""The trade-off study: which private method to use, and what accuracy to expect.

Reproduces and extends the empirical study of van der Maaten & Hannun (2020),
"The Trade-Offs of Private Prediction" (Section 4): private training (output
and objective perturbation, DP-SGD, DP-CD) against private prediction
(prediction sensitivity, subsample-and-aggregate) as epsilon, delta, the
inference budget B, n, d, k, lambda and m vary.

>>> from privml.study import load_preset, preset_names
>>> "quick" in preset_names()
True
>>> spec = load_preset("quick-ci")
>>> spec.dataset, spec.selection.mode
('digits', 'validation')

Run one with :func:`run_study` (or ``privml study run quick --out DIR``);
results go to a resumable SQLite store and an HTML report
(:func:`write_report`). The parts: :class:`StudySpec`, :func:`load_spec` and
:func:`load_preset` (the declarative study), :func:`get_method` (the method
registry), :func:`plan` (the runs of a spec), :class:`ResultStore` (the
resumable store), :func:`make_executor` (serial, joblib or Dask),
:func:`collect` (the results, aggregated), :func:`recommend` and
:func:`write_report`.
"""

from privml.study._aggregate import StudyResults, collect
from privml.study._executors import DaskExecutor, JoblibExecutor, SerialExecutor, make_executor
from privml.study._methods import METHODS, Method, MethodUnavailable, get_method
from privml.study._points import plan
from privml.study._recommend import Recommendation, recommend, recommendations
from privml.study._report import write_report
from privml.study._runner import StudyRun, run_study
from privml.study._spec import StudySpec, spec_from_dict
from privml.study._spec_file import load_spec
from privml.study._spec_parts import Selection, Sweep
from privml.study._store import ResultStore
from privml.study.presets import load_preset, preset_names

__all__ = [
    "METHODS",
    "DaskExecutor",
    "JoblibExecutor",
    "Method",
    "MethodUnavailable",
    "Recommendation",
    "ResultStore",
    "Selection",
    "SerialExecutor",
    "StudyResults",
    "StudyRun",
    "StudySpec",
    "Sweep",
    "collect",
    "get_method",
    "load_preset",
    "load_spec",
    "make_executor",
    "plan",
    "preset_names",
    "recommend",
    "recommendations",
    "run_study",
    "spec_from_dict",
    "write_report",
]
