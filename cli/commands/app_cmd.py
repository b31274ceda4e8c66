"""`attnlab app`: start the Streamlit app headless."""

from __future__ import annotations

import importlib.util
import os
import sys

from attnlab.cli.commands.common import add_device_args, placement_args, run_settings
from attnlab.cli.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="start the web app")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface, "
                        "better behind a reverse proxy)")
    p.add_argument("--port", type=int, default=8501, help="port to listen on (default 8501)")
    hub = p.add_mutually_exclusive_group()
    hub.add_argument("--allow-hub", action="store_true",
                     help="let users download hub models from the model box even on a public --host (a server on "
                          "127.0.0.1, the default, may unless --no-hub)")
    hub.add_argument("--no-hub", action="store_true",
                     help="never download hub models from the model box (a class server on 127.0.0.1 behind a proxy)")
    p.add_argument("--tour", default=None, metavar="FILE",
                   help="open the Lecture tour on this tour file (JSON, saved from the tour page) instead of the "
                        "built-in one")
    p.add_argument("--max-memory", default=None, metavar="GB",
                   help="the most memory (GB, 10⁹ bytes) the server process may hold, models included; a run that "
                        "would pass it goes a lighter way or is refused in one line (default: half the memory "
                        "available when the server starts)")
    p.add_argument("--max-tokens", action="append", default=[], metavar="MODEL=TOKENS",
                   help="the most tokens one text may have on a model, e.g. smollm2=2048 (repeatable)")
    p.add_argument("--no-warm", action="store_true",
                   help="skip the warm start (by default the server loads the default model and computes the "
                        "opening page's presets in the background before the first visitor)")
    add_device_args(p)
    p.set_defaults(run=run)


def budget_env(args) -> dict[str, str]:
    """ATTNLAB_MAX_MEMORY / ATTNLAB_MAX_TOKENS from --max-memory / --max-tokens, checked (InputError, one line);
    the default budget is model.budget.server_default() when the server starts."""
    from attnlab.model import budget

    caps = budget.parse_caps(args.max_tokens)
    limit = budget.parse_memory(args.max_memory) if args.max_memory is not None else budget.server_default()
    held = budget.rss_bytes()  # what a server holds before its first model: this process, attnlab imported
    if args.max_memory is not None and limit <= held:
        raise UsageError(f"--max-memory {args.max_memory} GB is less than the server holds before it loads a model "
                         f"(about {held / budget.GB:.2f} GB); give more, e.g. --max-memory 4")
    env = {budget.ENV_TOKENS: ",".join(f"{k}={v}" for k, v in caps.items())}
    if limit is not None:
        env[budget.ENV_MEMORY] = f"{limit / budget.GB:.3f}"
    return env


def run(args) -> int:
    """Check the arguments, then replace this process with `streamlit run app/main.py`. The device and dtype
    reach the app as ATTNLAB_DEVICE / ATTNLAB_DTYPE (read by app/state.py), resolved here first so that
    cuda without a GPU fails now, as one line; --device-map/--device-memory/--offload-folder as ATTNLAB_DEVICE_MAP /
    ATTNLAB_DEVICE_MEMORY / ATTNLAB_OFFLOAD_FOLDER; --allow-hub / --no-hub as ATTNLAB_ALLOW_HUB=1 / 0; --tour FILE,
    checked here, as ATTNLAB_TOUR (read by app/tour/editor.py); the memory budget (model.budget) as
    ATTNLAB_MAX_MEMORY (GB) and ATTNLAB_MAX_TOKENS ("smollm2=2048,…")."""
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be 1..65535, got {args.port}")
    from attnlab.model.device import dtype_name

    device, dtype = run_settings(args)
    env = os.environ | {"ATTNLAB_DEVICE": device, "ATTNLAB_DTYPE": dtype_name(dtype)} | budget_env(args)
    placement_args(args)  # checked now: a wrong --device-memory fails here, as one line
    for flag, key in (("device_map", "ATTNLAB_DEVICE_MAP"), ("device_memory", "ATTNLAB_DEVICE_MEMORY"),
                      ("offload_folder", "ATTNLAB_OFFLOAD_FOLDER")):
        if getattr(args, flag):
            env[key] = getattr(args, flag)
    if args.allow_hub or args.no_hub:
        env["ATTNLAB_ALLOW_HUB"] = "1" if args.allow_hub else "0"
    if args.tour:
        from pathlib import Path

        import streamlit.logger

        streamlit.logger.set_log_level("error")  # the tour's builders import the app's cached loaders: ~50 warnings
        from attnlab.app.tour.tour_file import TourFileError, load_tour

        try:
            load_tour(args.tour)  # a bad file: one line now, not a message on the tour page later
        except TourFileError as e:
            raise UsageError(str(e)) from e
        env["ATTNLAB_TOUR"] = str(Path(args.tour).resolve())
    if importlib.util.find_spec("streamlit") is None:  # said here: the server's own process would print a traceback
        raise ModuleNotFoundError("No module named 'streamlit'", name="streamlit")
    from attnlab.app.serve import streamlit_command

    os.execve(sys.executable, streamlit_command(args.host, args.port, warm=not args.no_warm), env)
    return 0
