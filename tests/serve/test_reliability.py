"""Under load and across crashes the budget is never exceeded or under-counted."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
import uuid

import pytest

from privml.io import save_model
from privml.ledger import PostgresLedger, SQLiteLedger
from privml.linear._nonprivate import NonPrivateClassifier
from privml.serve import PredictionService
from tests.serve.cli_process import start_server, stop
from tests.serve.helpers import BudgetedDouble, breast_cancer_rows, request, running, small_limits

CLIENTS = 8
REQUESTS = 200
BUDGET = 1000


def _hammer(url: str, rows, n: int, results: list, stop_event: threading.Event | None = None) -> None:
    """Send ``n`` one-row requests on one keep-alive connection; record each status."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        for i in range(n):
            if stop_event is not None and stop_event.is_set():
                return
            body = json.dumps({"rows": rows[i % len(rows) : i % len(rows) + 1].tolist()})
            try:
                conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                payload = json.loads(response.read())
            except (OSError, http.client.HTTPException, ValueError):
                results.append("failed")  # the server died: this answer was not received
                return
            results.append(response.status)
            if response.status == 200:
                assert len(payload["labels"]) == 1
    finally:
        conn.close()


def _concurrent_clients(ledger) -> dict:
    """8 clients x 200 one-row requests against a budget of 1000; returns the final /budget."""
    rows = breast_cancer_rows()[0]
    double = BudgetedDouble(ledger)
    results: list = []
    with running(PredictionService(double, limits=small_limits())) as server:
        threads = [threading.Thread(target=_hammer, args=(server.url, rows, REQUESTS, results))
                   for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        _, budget = request(server, "GET", "/budget")
    assert len(results) == CLIENTS * REQUESTS
    assert results.count(200) == BUDGET
    assert results.count(429) == CLIENTS * REQUESTS - BUDGET
    assert budget["spent"] == BUDGET == double.computed and budget["remaining"] == 0
    return budget


def test_concurrent_clients_get_exactly_the_budget(tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", budget=BUDGET)
    _concurrent_clients(ledger)
    ledger.close()
    with SQLiteLedger(tmp_path / "ledger.sqlite", budget=BUDGET) as reopened:
        assert reopened.spent == BUDGET


def test_concurrent_clients_on_postgres(postgres_url):
    with PostgresLedger(postgres_url, budget=BUDGET, name=f"serve-{uuid.uuid4().hex[:8]}") as ledger:
        _concurrent_clients(ledger)
        assert ledger.spent == BUDGET


@pytest.fixture(scope="module")
def nonprivate_file(tmp_path_factory):
    X, y = breast_cancer_rows()
    model = NonPrivateClassifier(classes=(0, 1)).fit(X, y)
    return save_model(model, tmp_path_factory.mktemp("model") / "nonprivate.npz")


def test_sigkill_mid_load_never_under_counts(tmp_path, nonprivate_file):
    rows = breast_cancer_rows()[0]
    ledger = str(tmp_path / "ledger.sqlite")
    args = ("--model", str(nonprivate_file), "--method", "prediction-sensitivity", "--epsilon", "1",
            "--budget", "100000", "--ledger", ledger)
    proc, started = start_server(*args)
    results: list = []
    halt = threading.Event()
    try:
        threads = [threading.Thread(target=_hammer, args=(started["url"], rows, 10_000, results, halt))
                   for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while results.count(200) < 150 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # no chance to flush or clean up
        proc.wait(timeout=10)
        halt.set()
        for t in threads:
            t.join(timeout=30)
    finally:
        stop(proc)
    answered = results.count(200)
    assert answered >= 150
    proc, started = start_server(*args)
    try:
        assert started["spent"] >= answered  # charge first: a crash can only over-count
        assert started["spent"] <= answered + 4  # at most the requests in flight when killed
        status, budget = request(started["url"], "GET", "/budget")
        assert status == 200 and budget["spent"] == started["spent"]
        status, out = request(started["url"], "POST", "/predict", {"rows": rows[:2].tolist()})
        assert status == 200 and request(started["url"], "GET", "/budget")[1]["spent"] == started["spent"] + 2
    finally:
        stop(proc)


def test_sigterm_stops_gracefully(tmp_path, nonprivate_file):
    proc, started = start_server("--model", str(nonprivate_file), "--epsilon", "1", "--budget", "10",
                                 "--ledger", str(tmp_path / "ledger.sqlite"))
    try:
        assert request(started["url"], "GET", "/healthz") == (200, {"status": "ok"})
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert b"stopped (signal 15)" in err
    finally:
        stop(proc)
