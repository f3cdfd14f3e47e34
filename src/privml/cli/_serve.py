"""``privml serve``: answer predictions over HTTP under an enforced budget.

    privml serve --model model.npz [--method prediction-sensitivity|subsample-aggregate]
                 [--epsilon E] [--delta D] [--budget B] [--ledger PATH|URL]
                 [--host 127.0.0.1] [--port 8000] [--api-keys FILE] [--workers N]
                 [--max-rows N] [--max-body-bytes N] [--device D] [--json]

Endpoints: ``POST /predict``, ``GET /budget``, ``GET /healthz``,
``GET /openapi.json``. A private-prediction model needs ``--ledger`` (a
SQLite file or ``postgresql://`` URL) so the count survives restarts; a
privately trained model is served as is, without budget. The server is the
ASGI application on uvicorn (``pip install 'privml[serve]'``); ``--workers N``
runs N processes on one socket, all charging the one ledger. On start one
line (with ``--json`` one JSON object) gives the URL; SIGTERM or SIGINT stops
the server after the requests in progress. A CNN file (``dpsgd-cnn``) runs
on ``--device`` (``auto``, the default: CUDA when available), in every worker;
for any other file ``--device`` is an error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from privml._validation import check_port
from privml.cli._common import (
    DEVICE_HELP,
    CliError,
    add_command,
    add_json_flag,
    emit,
    finite_float,
    fmt,
    integer,
    refuse_seed_with_ledger,
)
from privml.cli._served_options import add_privacy_options
from privml.serve._keys import load_api_keys
from privml.serve._limits import ServeLimits
from privml.serve._model import ModelSpec
from privml.serve._server import PredictionServer
from privml.serve._workers import ServeSpec, build_service, serve_workers

if TYPE_CHECKING:  # the ASGI server needs the serve extra: imported where it is used
    import socket

    from privml.serve._asgi_server import AsgiPredictionServer

SERVERS = ("uvicorn", "stdlib")
#: The ServeLimits fields the command line sets, each from the option of the same name (--max-rows, ...).
LIMIT_OPTIONS = ("max_rows", "max_body_bytes", "max_connections", "threads", "header_timeout", "body_timeout",
                 "idle_timeout")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "serve", _serve, description=(
        "Serve a model file over HTTP. Private-prediction models charge every answered row to a "
        "persistent ledger before computing it; requests beyond the budget get 429."))
    parser.add_argument("--model", required=True, help="model .npz file")
    add_privacy_options(parser, ledger_help="SQLite file or postgresql:// URL counting the answers")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8000, help="port (0 picks a free one; default 8000)")
    parser.add_argument("--api-keys", help="JSON file {key: quota}; requests then need an X-API-Key header")
    parser.add_argument("--workers", type=integer, default=1,
                        help="server processes sharing the socket and the ledger (default 1)")
    parser.add_argument("--server", choices=SERVERS, default="uvicorn",
                        help="uvicorn (default: the ASGI application) or stdlib (the standard-library server, "
                             "one process, one thread per connection; kept as the benchmarks' baseline)")
    parser.add_argument("--max-rows", type=integer, default=ServeLimits.max_rows,
                        help=f"rows per request (default {ServeLimits.max_rows})")
    parser.add_argument("--max-body-bytes", type=integer, default=ServeLimits.max_body_bytes,
                        help=f"largest request body (default {ServeLimits.max_body_bytes})")
    parser.add_argument("--max-connections", type=integer,
                        help="connections served at once per worker; beyond it 503 (default 1000; stdlib 64)")
    parser.add_argument("--threads", type=integer, default=ServeLimits.threads,
                        help=f"threads per worker that charge the ledger and compute answers "
                             f"(default {ServeLimits.threads})")
    parser.add_argument("--header-timeout", type=finite_float, default=ServeLimits.header_timeout,
                        help=f"seconds to receive a whole request head (default {ServeLimits.header_timeout:g})")
    parser.add_argument("--body-timeout", type=finite_float, default=ServeLimits.body_timeout,
                        help=f"seconds to receive a whole body (default {ServeLimits.body_timeout:g})")
    parser.add_argument("--idle-timeout", type=finite_float, default=ServeLimits.idle_timeout,
                        help=f"seconds a kept-alive connection may idle (default {ServeLimits.idle_timeout:g})")
    parser.add_argument(
        "--seed", type=integer,
        help="noise seed, for tests only: a known seed lets anyone replay the noise (default: fresh OS entropy on "
             "every start and in every worker; never read from the model file; needs --workers 1 and "
             "no --ledger)",
    )
    parser.add_argument("--device", help=DEVICE_HELP)
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    add_json_flag(parser)


def _port(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (refused at parse time, before any ledger is opened)."""
    try:
        return check_port(integer(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port in [0, 65535]: {text!r}") from None


def _require_extra() -> None:
    """The ``serve`` extra, or a one-line error that says how to install it."""
    try:
        import privml.serve._asgi_server  # lazy(extra): serve: fastapi, pydantic, uvicorn, h11  # noqa: F401
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise CliError(f"serving needs the serve extra (missing {missing}): pip install 'privml[serve]'") from None


def _serve(args: argparse.Namespace) -> None:
    # Everything that can be wrong is checked before the ledger is opened (the port is bound just before it).
    _require_extra()

    if args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    if args.server == "stdlib" and args.workers != 1:
        raise CliError("the stdlib server runs one process: --workers needs --server uvicorn")
    if args.seed is not None and args.workers != 1:
        raise CliError("a seed would give every worker the same noise, so answers could be averaged: "
                       "--seed (for tests only) needs --workers 1")
    refuse_seed_with_ledger(args.seed, args.ledger)
    spec = _spec(args)
    from privml.serve._asgi_server import AsgiPredictionServer, bind_socket  # lazy(extra): serve: fastapi, uvicorn

    # The socket first: building the service opens the ledger, which binds its budget for good, so an
    # address that cannot be listened on (bad host, busy port) must be refused before it.
    sock = bind_socket(args.host, args.port)
    server: PredictionServer | AsgiPredictionServer | None
    try:
        # The supervisor opens everything once too, so a bad model, ledger or key file is refused
        # here, in one line, before any worker starts.
        served, service = build_service(spec)
    except BaseException:
        sock.close()
        raise
    try:
        budget = service.budget()
        if args.server == "stdlib":
            server = PredictionServer(service, sock=sock, verbose=args.verbose)
        elif args.workers == 1:
            server = AsgiPredictionServer(service, sock=sock, verbose=args.verbose)
        else:
            server = None
            if served.ledger is not None:
                served.ledger.close()  # each worker opens its own
    except BaseException:
        if served.ledger is not None:
            served.ledger.close()
        sock.close()
        raise
    started = {
        "url": server.url if server is not None else _url(sock),
        "model": args.model,
        "method": served.method,
        "epsilon": budget["epsilon"],
        "delta": budget["delta"],
        "budget": budget["budget"],
        "spent": budget["spent"],
        "ledger": getattr(served.ledger, "url", None) or (str(args.ledger) if args.ledger else None),
        "api_keys": len(spec.api_keys) if spec.api_keys else 0,
        "server": args.server,
        "workers": args.workers,
    }

    def announce() -> None:
        emit(started, as_json=args.json, render=_render)
        sys.stdout.flush()

    if server is not None:
        announce()
        received = server.serve_until_signal()
    else:
        try:
            received = serve_workers(spec, sock, args.workers, announce)
        except RuntimeError as exc:
            raise CliError(str(exc)) from None
        finally:
            sock.close()
    if received is not None:
        print(f"privml serve: stopped (signal {received})", file=sys.stderr)


def _spec(args: argparse.Namespace) -> ServeSpec:
    """What every worker opens and serves, from the command line."""
    limits = ServeLimits(**{name: getattr(args, name) for name in LIMIT_OPTIONS})
    return ServeSpec(model=ModelSpec.from_args(args), api_keys=load_api_keys(args.api_keys) if args.api_keys else None,
                     limits=limits, verbose=args.verbose)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in str(host) else host
    return f"http://{host}:{port}"


def _render(r: dict) -> str:
    guarantee = f"({fmt(r['epsilon'], 4)}, {fmt(r['delta'], 3)})-DP"
    if r["budget"] is None:
        cost = "no budget: privately trained, predictions are free"
    else:
        cost = f"{r['spent']} of {r['budget']} answers spent, ledger {r['ledger']}"
    workers = f"{r['workers']} workers" if r["workers"] != 1 else "1 worker"
    return f"privml serve: {r['model']} ({r['method']}, {guarantee}; {cost}) at {r['url']} ({r['server']}, {workers})"
