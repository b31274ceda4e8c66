"""The `attnlab` command (also `python -m attnlab.cli`). Each sub-command lives in cli/commands/<name>.py with
`add_parser(subparsers)` and `run(args) -> int`. Bad input exits 2 with one line on stderr."""

from __future__ import annotations

import argparse
import importlib
import sys

from attnlab.cli.errors import UsageError

PACKAGES = {"PIL": "pillow"}  # a module whose distribution has another name
MAX_ERROR = 2000  # characters of one error line (a refusal lists every supported family in full)
COMMANDS = ("app_cmd", "bench", "capture", "check", "compare_hf", "eval", "faithfulness", "families", "handout",
            "models", "pull", "train", "lens", "patch", "qk", "circuit", "sinks", "mixing")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print usage too)
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    from attnlab.data import version

    parser = _Parser(prog="attnlab", description="Attention visualization and interpretability.")
    parser.add_argument("--version", action="version", version=f"attnlab {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"attnlab.cli.commands.{name}").add_parser(sub)
    return parser


def backend_options(parser: argparse.ArgumentParser, command: str) -> tuple[str, ...]:
    """The choices of `command`'s --backend option (none: the command runs the backend it needs), so that a
    refusal for memory names --backend sdpa only where it can be passed."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    option = sub._option_string_actions.get("--backend")
    return tuple(option.choices or ()) if option is not None else ()


def main(argv: list[str] | None = None) -> int:
    from attnlab.model.budget import backend_choice
    from attnlab.model.checkpoint import CheckpointError
    from attnlab.model.inputs import InputError
    from attnlab.model.transformer import ContextLengthError

    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        with backend_choice("--backend sdpa" if "sdpa" in backend_options(parser, args.command) else None):
            return int(args.run(args) or 0)
    except (UsageError, InputError, CheckpointError, ContextLengthError) as e:
        print(f"attnlab: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # a partial install (pip install --no-deps; a machine without the app's packages)
        top = (e.name or "").split(".")[0]
        if not top or top == "attnlab":
            raise
        print(f"attnlab: error: this command needs the package {top}, which is not installed "
              f"(pip install {PACKAGES.get(top, top)})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`attnlab models --json | head`): nothing left to say
        sys.stderr.close()
        return 0


def _one_line(msg: str) -> str:
    return " ".join(msg.split())[:MAX_ERROR]


if __name__ == "__main__":
    sys.exit(main())
