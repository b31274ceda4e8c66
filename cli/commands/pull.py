"""`attnlab pull ID [--revision R]`: download a hub model's config, safetensors and tokenizer files into the
local Hugging Face cache (where `attnlab models`, the app's model list and `--model ID` find it)."""

from __future__ import annotations

import sys

from attnlab.cli.commands.common import print_json


def add_parser(sub) -> None:
    p = sub.add_parser("pull", help="download a hub model (config, safetensors, tokenizer) into the HF cache")
    p.add_argument("repo_id", help="a hub id: org/name, or a bare name such as gpt2")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default main)")
    p.add_argument("--dry-run", action="store_true", help="list the files and sizes, download nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.model import hub
    from attnlab.model.hf.cache import resolve_cached
    from attnlab.model.memory import fmt_gb

    p = hub.plan(args.repo_id, args.revision)
    hub.check_room(p)
    summary = {"repo_id": p.repo_id, "revision": p.revision, "commit": p.commit, "files": p.files,
               "bytes": p.total, "folder": str(p.folder)}
    if not args.json:
        print(f"{p.repo_id} @ {p.revision} ({p.commit[:10]}): {len(p.files)} files, {fmt_gb(p.total)}", file=sys.stderr)
    if args.dry_run:
        if args.json:
            print_json(summary | {"downloaded": False})
        return 0
    folder = hub.pull(args.repo_id, args.revision, progress=not args.json)
    listed = resolve_cached(args.repo_id) == folder if p.revision == "main" else None
    if args.json:
        print_json(summary | {"downloaded": True, "folder": str(folder), "listed": listed})
    else:
        print(f"{p.repo_id}: in the Hugging Face cache at {folder}; load it with --model {p.repo_id}")
    return 0
