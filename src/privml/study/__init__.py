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
(:func:`write_report`). Modules: :mod:`~privml.study.spec` (the declarative
study), :mod:`~privml.study.methods` (the method registry),
:mod:`~privml.study.prepare` (data cuts, PCA on public data),
:mod:`~privml.study.selection` (hyper-parameters, leaky or private),
:mod:`~privml.study.store`, :mod:`~privml.study.executors`,
:mod:`~privml.study.runner`, :mod:`~privml.study.aggregate`,
:mod:`~privml.study.findings`, :mod:`~privml.study.summary`,
:mod:`~privml.study.recommend`, :mod:`~privml.study.report`.
"""

from privml.study.aggregate import StudyResults, collect
from privml.study.executors import DaskExecutor, JoblibExecutor, SerialExecutor, make_executor
from privml.study.methods import METHODS, Method, MethodUnavailable, get_method
from privml.study.points import plan
from privml.study.presets import load_preset, preset_names
from privml.study.recommend import Recommendation, recommend, recommendations
from privml.study.report import write_report
from privml.study.runner import StudyRun, run_study
from privml.study.spec import StudySpec, spec_from_dict
from privml.study.spec_file import load_spec
from privml.study.spec_parts import Selection, Sweep
from privml.study.store import ResultStore

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
