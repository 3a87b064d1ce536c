"""``latency-budget serve``: an OTLP trace receiver that judges whole traces and forwards them.

Every option has an environment variable, ``LATENCY_BUDGET_SERVE_<OPTION>`` (the option
in capitals, ``-`` as ``_``); the option wins. Where the spans, violation logs and
budget metrics go is the standard ``OTEL_EXPORTER_OTLP_*`` settings, or
``--forward-endpoint``. The server runs until SIGTERM or SIGINT, then drains within
``--shutdown-timeout`` and exits 0. A second SIGTERM or SIGINT while it drains is logged
(``signal_during_drain``) and the drain goes on to its deadline. The budget file is
checked for changes every ``--reload-interval`` seconds (its symlinks followed each time,
as a ConfigMap volume's update needs): a changed file that loads is used from then on
(``budgets_reloaded``), a broken one keeps the last good (``budget_reload_failed``, naming
its file, line and key). SIGHUP checks it at once (``reload_requested``), or, with
``--reload-interval off``, is logged (``signal_ignored``) and changes nothing.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from latency_budget._config import BudgetConfigError
from latency_budget._config.reload import BudgetFileWatcher
from latency_budget._serve.options import OPTIONS
from latency_budget.cli._common import CliError, example_epilog, raw_help

__all__ = ["register", "run"]


STOP_POLL_S = 0.2  # how soon the main thread runs a signal handler delivered to another thread


def register(commands: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser = commands.add_parser(
        "serve",
        help="judge whole traces from any language: an OTLP receiver behind the Collector",
        description=(
            "Receive spans over OTLP (gRPC, and HTTP with protobuf or JSON), judge each whole trace "
            "against the budget file with the in-process accounting, annotate its root, and forward "
            "every span to the next OTLP hop (OTEL_EXPORTER_OTLP_* or --forward-endpoint). Violation "
            "and hint logs and budget metrics go to the same OTLP settings. Every option has an "
            "environment variable LATENCY_BUDGET_SERVE_<OPTION>; the option wins. See docs/collector-tier.md."
        ),
        epilog=example_epilog(
            "latency-budget serve --budgets budgets.yaml",
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4317 latency-budget serve --budgets budgets.yaml \\\n"
            "      --grpc-endpoint 0.0.0.0:4317 --http-endpoint none",
        ),
        formatter_class=raw_help(),
    )
    for row in OPTIONS:
        flags = (f"--{row.flag}", row.short) if row.short else (f"--{row.flag}",)
        parser.add_argument(*flags, metavar=row.metavar, help=row.help_line())
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; 0 after a drain, 2 for bad options or an address in use."""
    values = _values(args, os.environ)
    budgets = values["budgets"]
    if budgets is None:
        raise CliError("serve: --budgets FILE (or LATENCY_BUDGET_SERVE_BUDGETS) is required")
    # Loaded through the watcher, which remembers the version it loaded; its checks start with the server.
    watcher = BudgetFileWatcher(
        budgets,
        lambda new: server.reload(new, budgets),
        source=budgets,
        on_failure=lambda error: server.reload_failed(error),  # noqa: PLW0108 - server is made below
    )
    try:
        config = watcher.load()
    except BudgetConfigError as exc:
        raise CliError(str(exc)) from None

    # Imported here: grpc and the exporters take a moment to load, and only serve needs them.
    from latency_budget._serve.assembly import Limits  # noqa: PLC0415
    from latency_budget._serve.forwarder import open_logs_sender, open_sender  # noqa: PLC0415
    from latency_budget._serve.reports import open_report_sinks  # noqa: PLC0415
    from latency_budget._serve.server import ServeOptions, Server  # noqa: PLC0415
    from latency_budget._serve.wal import WalError, WalOptions  # noqa: PLC0415
    from latency_budget.export._otlp import OtlpSettingError, otlp_target  # noqa: PLC0415

    fields: dict[str, dict[str, Any]] = {"": {}, "limits": {}, "wal": {}}
    for row in OPTIONS:
        if row.field is not None:
            group, _, name = row.field.rpartition(".")
            fields[group][name] = values[row.flag]
    limits = Limits(**fields["limits"])
    wal = WalOptions(**fields["wal"]) if values["wal-dir"] is not None else None
    if wal is not None and wal.max_bytes > limits.max_bytes:
        # What the log holds must fit back in the buffer when it is replayed.
        raise CliError("serve: --wal-max-bytes must not be larger than --max-bytes")
    options = ServeOptions(**fields[""], limits=limits, wal=wal)
    if options.max_request_bytes > limits.max_bytes:
        raise CliError("serve: --max-request-bytes must not be larger than --max-bytes")
    reports = values["reports"]
    metric_interval = values["metric-interval"]
    try:
        target = otlp_target(values["forward-endpoint"], strict=True, endpoint_name="--forward-endpoint")
        handover_at = options.handover_endpoint
        handover = (
            otlp_target(handover_at, strict=True, endpoint_name="--handover-endpoint")
            if handover_at is not None
            else None
        )
    except OtlpSettingError as exc:
        raise CliError(f"serve: {exc}") from None

    # The exporters log every failed attempt; the server logs the next hop going down and up once.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    sinks = (
        open_report_sinks(
            target, metric_interval_s=metric_interval, partial_in_metrics=values["partial-in-metrics"] == "yes"
        )
        if reports == "otlp"
        else None
    )
    try:
        server = Server(
            config,
            options,
            open_sender(target),
            destination=target.describe("traces"),
            sinks=sinks.sinks if sinks is not None else (),
            flush_sinks=sinks.flush if sinks is not None else None,
            metric_bank=sinks.bank if sinks is not None else None,
            handover=open_sender(handover, tls_by_scheme=True) if handover is not None else None,
            handover_destination=handover.describe("traces") if handover is not None else "",
            logs_sender=open_logs_sender(target),
        )
    except WalError as exc:
        raise CliError(f"serve: {exc}") from None
    except (OSError, RuntimeError) as exc:
        raise CliError(f"serve: cannot listen: {exc}") from None
    stop = threading.Event()

    def later(event: str, **fields: object) -> None:
        # Logged on a thread of its own: the handler may have interrupted the main thread inside the log's lock.
        threading.Thread(target=server.log.event, args=(event,), kwargs={"always": True, **fields}).start()

    def on_stop(signum: int, _frame: object) -> None:
        if stop.is_set():
            name = signal.Signals(signum).name
            later("signal_during_drain", signal=name, action="the drain goes on until --shutdown-timeout")
        stop.set()

    reload_interval = values["reload-interval"]
    hangups = threading.Event()

    def answer_hangups() -> None:
        # A thread of its own, started before the handler is set: the handler only sets an event.
        while True:
            hangups.wait()
            if stop.is_set():
                return
            hangups.clear()
            server.log.event("reload_requested", always=True, signal="SIGHUP", file=budgets)
            watcher.check()

    def on_hangup(signum: int, _frame: object) -> None:
        if reload_interval is None:
            later("signal_ignored", signal="SIGHUP", reason="--reload-interval off: restart to reload the budget file")
        else:
            hangups.set()

    if reload_interval is not None:
        threading.Thread(target=answer_hangups, name="latency-budget-reload-now", daemon=True).start()

    handlers = {signal.SIGTERM: on_stop, signal.SIGINT: on_stop, signal.SIGHUP: on_hangup}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        server.start()
        if reload_interval is not None:
            watcher.start(reload_interval)
        # Everything loaded so far (grpc, protobuf, the SDK) lives as long as the process: kept
        # out of the garbage collector's full passes, which otherwise scan it again and again.
        gc.freeze()
        # Not stop.wait(): the kernel may deliver SIGTERM to any thread (gRPC's, the forwarder's),
        # and a main thread blocked in a lock without a timeout then never returns to the
        # interpreter, so the handler never runs (seen under load: no drain for 40 s). The
        # handler runs between two of these short sleeps; is_set() takes no lock the handler's
        # set() could be waiting for.
        while not stop.is_set():
            time.sleep(STOP_POLL_S)
        hangups.set()  # the hangup thread ends
        watcher.stop(1.0)
        server.drain()
    finally:
        watcher.stop(1.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _values(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """Each option's value by flag: the command line's, else its variable's, else its default.

    A bad value is a one-line error naming the option or the variable; a derived default
    (``--wal-max-bytes``: ``--max-bytes``) is the value of the option it follows.
    """
    values: dict[str, Any] = {}
    for row in OPTIONS:
        raw = getattr(args, row.dest, None)
        source = f"--{row.flag}"
        if raw is None:
            raw = env.get(row.env)
            source = row.env
            if raw is None or not raw.strip():  # an empty variable is unset; an empty option is an error
                values[row.flag] = values[row.derived_from] if row.derived_from is not None else row.default
                continue
        try:
            values[row.flag] = row.parse(raw.strip())
        except ValueError as exc:
            raise CliError(f"serve: {source}: {exc}") from None
    return values
