"""``privml serve`` end to end with the real predictors of privml.prediction."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from privml.cli.main import main
from privml.io import save_model
from privml.prediction import SubsampleAndAggregate
from privml.serve import PredictionService
from privml.serve._model import ModelSpec, open_served_model
from tests.cli_runner import run
from tests.serve.cli_process import start_server, stop
from tests.serve.helpers import breast_cancer_rows, check_response, request, running, small_limits


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Model files written by ``privml train`` (raw breast-cancer columns in, class names out)."""
    folder = tmp_path_factory.mktemp("models")
    files = {}
    for method in ("nonprivate", "output"):
        path = folder / f"{method}.npz"
        args = ["train", "--method", method, "--dataset", "breast_cancer", "--seed", "0", "--out", str(path)]
        if method == "output":
            args += ["--epsilon", "1"]
        assert main(args) == 0
        files[method] = path
    X, y = breast_cancer_rows()
    teachers = SubsampleAndAggregate(n_models=5, epsilon=1.0, budget=50, classes=(0, 1), random_state=0).fit(X, y)
    files["aggregate"] = save_model(teachers, folder / "aggregate.npz")
    return files


@pytest.fixture(scope="module")
def raw_rows():
    return load_breast_cancer().data  # as a client has them: the server applies the recorded pipeline


def test_prediction_sensitivity_over_http_with_keys(tmp_path, trained, raw_rows, capsys):
    capsys.readouterr()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"alpha-key": 3, "beta-key": 3}))  # quotas may not sum past the budget
    proc, started = start_server("--model", str(trained["nonprivate"]), "--method", "prediction-sensitivity",
                                 "--epsilon", "2", "--delta", "1e-6", "--budget", "6",
                                 "--ledger", str(tmp_path / "ledger.sqlite"), "--api-keys", str(keys))
    try:
        assert started["budget"] == 6 and started["spent"] == 0 and started["api_keys"] == 2
        url = started["url"]
        _, document = request(url, "GET", "/openapi.json")
        alpha = {"X-API-Key": "alpha-key"}
        status, out = request(url, "POST", "/predict", {"rows": raw_rows[:2].tolist(), "probabilities": True},
                              headers=alpha)
        check_response(document, "/predict", "POST", status, out)
        assert status == 200 and set(out["labels"]) <= {"malignant", "benign"}
        assert out["classes"] == ["malignant", "benign"]
        np.testing.assert_allclose(np.sum(out["probabilities"], axis=1), 1.0)
        assert request(url, "POST", "/predict", {"rows": raw_rows[:2].tolist()}, headers=alpha)[0] == 429
        assert request(url, "POST", "/predict", {"rows": raw_rows[:2].tolist()})[0] == 401
        assert request(url, "POST", "/predict", {"rows": raw_rows[:2, :7].tolist()}, headers=alpha)[0] == 422
        beta = {"X-API-Key": "beta-key"}
        assert request(url, "POST", "/predict", {"rows": raw_rows[:3].tolist()}, headers=beta)[0] == 200
        assert request(url, "POST", "/predict", {"rows": raw_rows[:1].tolist()}, headers=alpha)[0] == 200
        status, out = request(url, "POST", "/predict", {"rows": raw_rows[:1].tolist()}, headers=beta)
        assert status == 429 and "exhausted" in out["error"]
        status, budget = request(url, "GET", "/budget", headers=beta)
        check_response(document, "/budget", "GET", status, budget)
        assert (budget["spent"], budget["remaining"], budget["budget"]) == (6, 0, 6)
        assert budget["epsilon"] == pytest.approx(2.0) and budget["delta"] == pytest.approx(1e-6)
    finally:
        stop(proc)


def test_subsample_aggregate_serves_labels_only(tmp_path, trained):
    rows = breast_cancer_rows()[0]
    with pytest.raises(ValueError, match="fixed random_state replays"):  # as --seed with --ledger (a review)
        open_served_model(ModelSpec(trained["aggregate"], ledger=tmp_path / "ledger.sqlite", random_state=0))
    served = open_served_model(ModelSpec(trained["aggregate"], ledger=tmp_path / "ledger.sqlite"))
    with running(PredictionService(served.predictor, limits=small_limits())) as server:
        status, out = request(server, "POST", "/predict", {"rows": rows[:3].tolist()})
        assert status == 200 and len(out["labels"]) == 3 and set(out["labels"]) <= {0, 1}
        status, out = request(server, "POST", "/predict", {"rows": rows[:3].tolist(), "probabilities": True})
        assert status == 422 and "labels only" in out["error"]
        assert request(server, "GET", "/budget")[1]["spent"] == 3
    served.ledger.close()


def test_a_privately_trained_file_is_served_free(trained, raw_rows):
    served = open_served_model(ModelSpec(trained["output"]))
    assert served.ledger is None and served.class_names == ["malignant", "benign"]
    with running(PredictionService(served.predictor, preprocess=served.preprocess,
                                   class_names=served.class_names)) as server:
        status, out = request(server, "POST", "/predict", {"rows": raw_rows[:5].tolist()})
        assert status == 200 and len(out["labels"]) == 5
        assert request(server, "GET", "/budget")[1]["budget"] is None


def test_a_restart_continues_the_same_count(tmp_path, trained, raw_rows):
    ledger = tmp_path / "ledger.sqlite"
    settings = dict(method="prediction-sensitivity", epsilon=1.0, budget=10, ledger=ledger)
    first = open_served_model(ModelSpec(trained["nonprivate"], **settings))
    first.predictor.predict(first.preprocess(raw_rows[:4]))
    first.ledger.close()
    again = open_served_model(ModelSpec(trained["nonprivate"], **settings))
    assert again.ledger.spent == 4 and again.predictor.remaining() == 6
    again.ledger.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "needs a persistent ledger"),
        (["--ledger", "{ledger}"], "needs epsilon and budget"),
        (["--ledger", "{ledger}", "--epsilon", "1", "--budget", "10", "--method", "subsample-aggregate"],
         "prediction-sensitivity only"),
        (["--ledger", "{ledger}", "--epsilon", "1", "--budget", "10", "--api-keys", "{missing}"],
         "API key file not found"),
        (["--ledger", "{ledger}", "--epsilon", "1", "--budget", "10", "--max-rows", "0"], "max_rows must be >= 1"),
        (["--ledger", "mysql://h/db", "--epsilon", "1", "--budget", "10"], "unsupported ledger URL"),
        (["--ledger", "{ledger}", "--epsilon", "1", "--budget", "10", "--device", "cpu"],
         "--device applies to CNN model files (dpsgd-cnn, scatter-*) only"),
        (["--device", "tpu"], "--device applies to CNN model files (dpsgd-cnn, scatter-*) only"),
    ],
)
def test_usage_errors_are_one_line(tmp_path, trained, capsys, extra, message):
    args = [a.format(ledger=tmp_path / "l.sqlite", missing=tmp_path / "none.json") for a in extra]
    assert main(["serve", "--model", str(trained["nonprivate"]), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    if "--device" in extra:  # refused before the ledger is opened
        assert not (tmp_path / "l.sqlite").exists()


def test_a_ledger_is_refused_for_a_private_model_and_a_mismatch_on_reopen(tmp_path, trained, capsys):
    assert main(["serve", "--model", str(trained["output"]), "--ledger", str(tmp_path / "l.sqlite")]) == 2
    assert "takes no ledger" in capsys.readouterr().err
    ledger = tmp_path / "l.sqlite"
    open_served_model(ModelSpec(trained["nonprivate"], epsilon=1.0, budget=10, ledger=ledger)).ledger.close()
    assert main(["serve", "--model", str(trained["nonprivate"]), "--epsilon", "2", "--budget", "10",
                 "--ledger", str(ledger)]) == 2
    assert "refusing to mix two guarantees" in capsys.readouterr().err


def test_a_busy_port_is_one_line(tmp_path, trained, capsys):
    with running(PredictionService(open_served_model(ModelSpec(trained["output"])).predictor)) as server:
        port = str(server.server_address[1])
        assert main(["serve", "--model", str(trained["output"]), "--port", port]) == 2
    assert "cannot listen on 127.0.0.1:" in capsys.readouterr().err


def test_options_a_file_cannot_use_are_errors(tmp_path, trained):
    with pytest.raises(ValueError, match="takes no ledger name"):
        open_served_model(ModelSpec(trained["output"], ledger_name="prod"))
    with pytest.raises(ValueError, match="random_state"):
        open_served_model(ModelSpec(trained["output"], random_state=0))
    with pytest.raises(ValueError, match="no ledger was given"):
        open_served_model(ModelSpec(trained["nonprivate"], epsilon=1.0, budget=10, ledger_name="prod"), require_ledger=False)
    code = main(["serve", "--model", str(trained["output"]), "--delta", "0", "--port", "0"])
    assert code == 2  # refused before the port is opened


@pytest.mark.parametrize("server", ["uvicorn", "stdlib"])
@pytest.mark.parametrize(
    ("address", "message"),
    [
        (["--port", "70000"], "argument --port: not a port in [0, 65535]"),
        (["--port", "-1"], "argument --port: not a port in [0, 65535]"),
        (["--host", "999.999.0.1", "--port", "0"], "cannot listen on 999.999.0.1:0"),
        (["--host", "nonexist.invalid", "--port", "0"], "cannot listen on nonexist.invalid:0"),
    ],
)
def test_an_address_that_cannot_be_listened_on_binds_no_budget(tmp_path, trained, capsys, server, address, message):
    # The service (which opens the ledger and binds its budget) was built before the socket was bound.
    ledger = tmp_path / "l.sqlite"
    code, out, err = run(capsys, "serve", "--model", str(trained["nonprivate"]), "--epsilon", "1", "--budget", "10",
                         "--ledger", str(ledger), "--server", server, *address)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
    assert not ledger.exists()


def test_a_busy_port_binds_no_budget(tmp_path, trained, capsys):
    ledger = tmp_path / "l.sqlite"
    with running(PredictionService(open_served_model(ModelSpec(trained["output"])).predictor)) as server:
        port = str(server.server_address[1])
        code, _, err = run(capsys, "serve", "--model", str(trained["nonprivate"]), "--epsilon", "1", "--budget",
                           "10", "--ledger", str(ledger), "--port", port)
    assert code == 2 and "cannot listen on 127.0.0.1:" in err and err.count("\n") == 1, err
    assert not ledger.exists()


def test_the_socket_bound_first_is_closed_when_the_service_is_refused(trained, capsys, monkeypatch):
    import privml.serve._asgi_server as asgi_server

    bound = []
    bind = asgi_server.bind_socket
    monkeypatch.setattr(asgi_server, "bind_socket", lambda host, port: bound.append(bind(host, port)) or bound[-1])
    code, _, err = run(capsys, "serve", "--model", str(trained["output"]), "--delta", "0", "--port", "0")
    assert code == 2 and "delta" in err, err
    assert len(bound) == 1 and bound[0].fileno() == -1  # closed, not left listening


def test_an_empty_ledger_name_is_refused_before_the_ledger_is_opened(tmp_path, trained):
    # It was read as 'default' (privml serve and predict pass --ledger-name through open_served_model).
    ledger = tmp_path / "l.sqlite"
    with pytest.raises(ValueError, match="ledger name must be a non-empty string"):
        open_served_model(ModelSpec(trained["nonprivate"], epsilon=1.0, budget=10, ledger=ledger, ledger_name=""))
    assert not ledger.exists()


def test_the_model_file_is_read_once(tmp_path, trained, raw_rows, monkeypatch, capsys):
    import privml.io

    real, reads = privml.io._read_arrays, []

    def counting(path, **kwargs):
        reads.append(kwargs)
        return real(path, **kwargs)

    monkeypatch.setattr(privml.io, "_read_arrays", counting)
    spec = ModelSpec(trained["nonprivate"], epsilon=1.0, budget=10, ledger=tmp_path / "ledger.sqlite")
    served = open_served_model(spec)
    assert len(reads) == 1 and served.ledger.budget == 10 and served.predictor.ledger_ is served.ledger
    served.predictor.predict(served.preprocess(raw_rows[:2]))
    assert served.ledger.spent == 2  # the persistent ledger counts, from the first answer
    served.ledger.close()
    reads.clear()
    assert open_served_model(ModelSpec(trained["output"])).ledger is None and len(reads) == 1
    reads.clear()
    rows = tmp_path / "rows.csv"
    np.savetxt(rows, raw_rows[:3], delimiter=",", header=",".join(f"c{j}" for j in range(30)), comments="")
    code, _, err = run(capsys, "predict", "--model", str(trained["nonprivate"]), "--input", str(rows), "--epsilon",
                     "1", "--budget", "10", "--json")
    assert code == 0 and len(reads) == 1, err


def test_a_predictor_moves_to_a_ledger_only_before_it_answers(tmp_path, trained, raw_rows):
    from privml.ledger import MemoryLedger

    served = open_served_model(ModelSpec(trained["nonprivate"], epsilon=1.0, budget=10), require_ledger=False)
    predictor = served.predictor
    with pytest.raises(ValueError, match="budget is 5 answers"):
        predictor.use_ledger(MemoryLedger(5))
    predictor.predict(served.preprocess(raw_rows[:1]))
    with pytest.raises(ValueError, match="already charged 1 answers"):
        predictor.use_ledger(MemoryLedger(10, context=predictor.ledger_context()))
