"""``switchyard serve --config PATH [--host H] [--port P] [--workers N] [--log-level L]
[--log-format json|console] [--pid-file PATH]``, ``switchyard check-config PATH``, ``switchyard
reload (--pid-file PATH | --pid N) [--config PATH]``, ``switchyard prices [--config PATH]`` and
``switchyard --version``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from switchyard.core.prices import unpriced_routes
from switchyard.core.settings import ConfigError
from switchyard.http import verdict
from switchyard.http.checked import load_checked
from switchyard.http.logs import FORMAT_ENV, FORMATS, LEVEL_ENV, LEVELS
from switchyard.http.logs import settings as log_settings
from switchyard.http.prices import price_table
from switchyard.http.version import package_version


def build_parser() -> argparse.ArgumentParser:
    """The command line (deploy/ manifests are checked against it by the tests)."""
    parser = argparse.ArgumentParser(prog="switchyard", description="Switchyard LLM gateway")
    parser.add_argument("--version", action="version", version=f"switchyard {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", required=True, help="path to the YAML config")
    serve.add_argument("--host", help="overrides server.host")
    serve.add_argument("--port", type=int, help="overrides server.port")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes on one port (more than 1 needs a redis:// store)")
    serve.add_argument("--log-level", choices=LEVELS, help=f"overrides logging.level and ${LEVEL_ENV}")
    serve.add_argument("--log-format", choices=FORMATS,
                       help=f"json, or console for a terminal; overrides logging.format and ${FORMAT_ENV}")
    serve.add_argument("--pid-file", help="write the server's process id here while it runs "
                       "(for switchyard reload)")
    check = sub.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("path")
    prices = sub.add_parser("prices", help="print each route's price per million tokens and where it "
                            "came from (catalog, config, free)")
    prices.add_argument("--config", help="the YAML config (default: $SWITCHYARD_CONFIG)")
    reload = sub.add_parser("reload", help="make a running gateway re-read its config (SIGHUP)")
    which = reload.add_mutually_exclusive_group(required=True)
    which.add_argument("--pid-file", help="the file serve --pid-file wrote (then the command waits "
                       "for the server's verdict)")
    which.add_argument("--pid", type=int, help="the server's process id")
    reload.add_argument("--config", help="check this file first; refuse (exit 2) without signalling "
                        "when it is bad")
    reload.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                        help="with --pid-file: how long to wait for the server's verdict (exit 1 "
                        "with its reason when it refused the file; default 60)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    if args.command == "reload":
        return _reload(args)
    if args.command == "prices":
        args.config = args.config or os.environ.get("SWITCHYARD_CONFIG")
        if not args.config:
            print("switchyard: prices needs --config PATH (or $SWITCHYARD_CONFIG)", file=sys.stderr)
            return 2
    path = args.config if args.command in ("serve", "prices") else args.path
    try:
        config = load_checked(path)
    except ConfigError as e:
        print(f"switchyard: bad config\n{e}", file=sys.stderr)
        return 2
    if args.command == "prices":
        print(price_table(config))
        return 0
    if args.command == "check-config":
        print(f"{path}: ok ({len(config.models)} models, {len(config.teams)} teams, "
              f"{len(config.keys)} keys)")
        for route, why in unpriced_routes(config.models).items():
            print(f"warning: model {route} has no price ({why}): its requests are recorded as unpriced")
        return 0
    if args.workers < 1:
        print("switchyard: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        level, fmt = log_settings(args.log_level, args.log_format, config.logging.level,
                                  config.logging.format)
    except ValueError as e:
        print(f"switchyard: {e} (${LEVEL_ENV}, ${FORMAT_ENV})", file=sys.stderr)
        return 2
    os.environ[LEVEL_ENV], os.environ[FORMAT_ENV] = level, fmt  # worker processes read these
    from switchyard.http.server import serve as run  # check-config and --version need no server

    return run(config, path, args.host or config.server.host,
               args.port if args.port is not None else config.server.port, args.workers, args.pid_file)


def _reload(args: argparse.Namespace) -> int:
    """SIGHUP to the server; it validates the file again itself and logs what it did. With
    ``--pid-file`` the command waits for its verdict (verdict.py): exit 1 with the reason when
    the server (or any worker) kept its running config."""
    if args.config is not None:
        try:
            load_checked(args.config)
        except ConfigError as e:
            print(f"switchyard: bad config, nothing signalled\n{e}", file=sys.stderr)
            return 2
    pid = args.pid
    if pid is None:
        try:
            pid = int(Path(args.pid_file).read_text().strip())
        except (OSError, ValueError) as e:
            print(f"switchyard: cannot read a process id from {args.pid_file}: {e}", file=sys.stderr)
            return 1
    token = None
    if args.pid_file is not None:
        try:
            token = verdict.ask(args.pid_file)
        except OSError as e:
            print(f"switchyard: cannot write beside {args.pid_file}: {e.strerror}", file=sys.stderr)
            return 1
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as e:
        print(f"switchyard: cannot signal process {pid}: {e.strerror}", file=sys.stderr)
        return 1
    if token is None:  # --pid: no file to answer through
        print(f"switchyard: asked process {pid} to reload its config (its log says how it went)")
        return 0
    ok, reasons = verdict.wait(args.pid_file, token, args.wait)
    if not ok:
        print(f"switchyard: process {pid} did not reload its config\n" + "\n".join(reasons), file=sys.stderr)
        return 1
    print(f"switchyard: process {pid} reloaded its config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
