import numpy as np

from privml.audit._one_run import audit_from_scores
from privml.audit._one_run_linear import LinearOneRunResult
from privml.audit._one_run_result import OneRunFitResult


def _audit():
    rng = np.random.default_rng(0)
    included = rng.random(40) < 0.5
    return audit_from_scores(included + rng.normal(0.0, 0.1, 40), included, confidence=0.9), included


def test_the_json_row_puts_what_was_audited_first_and_the_run_facts_after_the_sizes():
    audit, included = _audit()
    shared = dict(audit=audit, n_real=100, n_train=140, seconds_fit=1.5, seconds_total=2.0,
                  scores=np.zeros(40), included=included)
    result = LinearOneRunResult(**shared, method="dpsgd", estimator="DPSGDClassifier", n_included=int(included.sum()),
                                details={"steps": 7})
    row = result.to_dict()
    own = [k for k in row if k not in audit.to_dict()]
    assert own == ["steps", "method", "estimator", "n_real", "n_train", "n_canaries_included", "seconds_fit",
                   "seconds", "training_runs"]
    assert row["n_canaries_included"] == included.sum() and row["seconds"] == 2.0
    assert "scores" not in row and "included" not in row
    plain = OneRunFitResult(**shared).to_dict()
    assert [k for k in plain if k not in audit.to_dict()] == ["n_real", "n_train", "seconds_fit", "seconds",
                                                              "training_runs"]
