"""``privml serve``: answer predictions over HTTP under an enforced budget.

    privml serve --model model.npz [--method prediction-sensitivity|subsample-aggregate]
                 [--epsilon E] [--delta D] [--budget B] [--ledger PATH|URL]
                 [--host 127.0.0.1] [--port 8000] [--api-keys FILE]
                 [--max-rows N] [--max-body-bytes N] [--json]

Endpoints: ``POST /predict``, ``GET /budget``, ``GET /healthz``,
``GET /openapi.json``. A private-prediction model needs ``--ledger`` (a
SQLite file or ``postgresql://`` URL) so the count survives restarts; a
privately trained model is served as is, without budget. On start one line
(with ``--json`` one JSON object) gives the URL; SIGTERM or SIGINT stops the
server after the requests in progress.
"""

from __future__ import annotations

import argparse
import sys

from privml.cli._common import add_json_flag, emit, finite_float, fmt, integer
from privml.serve import PredictionServer, PredictionService, ServeLimits, load_api_keys
from privml.serve.model import open_served_model

PREDICTION_METHODS = ("prediction-sensitivity", "subsample-aggregate")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve private predictions over HTTP with an enforced query budget",
        description=(
            "Serve a model file over HTTP. Private-prediction models charge every answered row to a "
            "persistent ledger before computing it; requests beyond the budget get 429."
        ),
    )
    parser.add_argument("--model", required=True, help="model .npz file")
    parser.add_argument("--method", choices=PREDICTION_METHODS,
                        help="private-prediction method (default: the file's; a non-private file needs "
                             "prediction-sensitivity)")
    parser.add_argument("--epsilon", type=finite_float, help="total epsilon over the whole budget")
    parser.add_argument("--delta", type=finite_float, default=0.0, help="total delta (default 0)")
    parser.add_argument("--budget", type=integer, help="number of answers (rows) the guarantee covers")
    parser.add_argument("--accounting", default="auto", help="composition used to calibrate (default auto)")
    parser.add_argument("--ledger", help="SQLite file or postgresql:// URL counting the answers")
    parser.add_argument("--ledger-name", default="default", help="budget name inside the ledger (default: default)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=integer, default=8000, help="port (0 picks a free one; default 8000)")
    parser.add_argument("--api-keys", help="JSON file {key: quota}; requests then need an X-API-Key header")
    parser.add_argument("--max-rows", type=integer, default=ServeLimits.max_rows,
                        help=f"rows per request (default {ServeLimits.max_rows})")
    parser.add_argument("--max-body-bytes", type=integer, default=ServeLimits.max_body_bytes,
                        help=f"largest request body (default {ServeLimits.max_body_bytes})")
    parser.add_argument("--seed", type=integer, help="noise seed, for tests only: a known seed lets anyone replay the noise (default: fresh OS entropy on every start; never read from the model file)")
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    add_json_flag(parser)
    parser.set_defaults(handler=_serve, prog=parser.prog)


def _serve(args: argparse.Namespace) -> None:
    # Everything that can be wrong is checked before the port is opened.
    limits = ServeLimits(max_rows=args.max_rows, max_body_bytes=args.max_body_bytes)
    api_keys = load_api_keys(args.api_keys) if args.api_keys else None
    served = open_served_model(
        args.model,
        method=args.method,
        epsilon=args.epsilon,
        delta=args.delta,
        budget=args.budget,
        accounting=args.accounting,
        ledger=args.ledger,
        ledger_name=args.ledger_name,
        random_state=args.seed,
    )
    try:
        service = PredictionService(
            served.predictor,
            limits=limits,
            api_keys=api_keys,
            preprocess=served.preprocess,
            class_names=served.class_names,
        )
        server = PredictionServer(service, host=args.host, port=args.port, verbose=args.verbose)
    except BaseException:
        if served.ledger is not None:
            served.ledger.close()
        raise
    budget = service.budget()
    emit(
        {
            "url": server.url,
            "model": args.model,
            "method": served.method,
            "epsilon": budget["epsilon"],
            "delta": budget["delta"],
            "budget": budget["budget"],
            "spent": budget["spent"],
            "ledger": getattr(served.ledger, "url", None) or (str(args.ledger) if args.ledger else None),
            "api_keys": len(api_keys) if api_keys else 0,
        },
        as_json=args.json,
        render=_render,
    )
    sys.stdout.flush()
    received = server.serve_until_signal()
    if received is not None:
        print(f"privml serve: stopped (signal {received})", file=sys.stderr)


def _render(r: dict) -> str:
    guarantee = f"({fmt(r['epsilon'], 4)}, {fmt(r['delta'], 3)})-DP"
    if r["budget"] is None:
        cost = "no budget: privately trained, predictions are free"
    else:
        cost = f"{r['spent']} of {r['budget']} answers spent, ledger {r['ledger']}"
    return f"privml serve: {r['model']} ({r['method']}, {guarantee}; {cost}) at {r['url']}"
