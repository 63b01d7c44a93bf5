"""``gpupool config``: contexts (``gpupool.client.config``), and ``gpupool completion``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpupool.client import config
from gpupool.core.errors import ConfigError

COMMANDS = (
    "submit",
    "get",
    "describe",
    "cancel",
    "delete",
    "apply",
    "cordon",
    "uncordon",
    "drain",
    "config",
    "completion",
    "serve",
    "sim",
    "bench",
    "k8s",
    "demo",
)
OWN = ("config", "completion")
KINDS = ("jobs", "nodes", "queues", "clusterqueues", "localqueues", "flavors", "cohorts", "events")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "config",
        help="contexts: named servers and tokens",
        description="Manage contexts (server, token, namespace) in "
        f"${config.ENV} or ~/.config/gpupool/config.yaml.",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    v = verbs.add_parser("set-context", help="create or change a context")
    v.add_argument("name")
    for field in config.FIELDS:
        v.add_argument(f"--{field}", default=None)
    v.add_argument("--current", action="store_true", help="make it the current context too")
    v.set_defaults(func=_set_context)
    v = verbs.add_parser("use-context", help="make a context the current one")
    v.add_argument("name")
    v.set_defaults(func=_use_context)
    v = verbs.add_parser("get-contexts", help="list the contexts")
    v.set_defaults(func=_get_contexts)
    v = verbs.add_parser("delete-context", help="remove a context")
    v.add_argument("name")
    v.set_defaults(func=_delete_context)
    v = verbs.add_parser("current-context", help="print the current context's name")
    v.set_defaults(func=lambda a: _print(config.load().get("current-context") or ""))

    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script: `source <(gpupool completion "
        "bash)`; zsh: `autoload -U +X bashcompinit && bashcompinit` "
        "first.",
    )
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=_completion)


def _print(text: str) -> int:
    if text:
        sys.stdout.write(text + "\n")
    return 0


def _set_context(args: argparse.Namespace) -> int:
    data = config.load()
    ctx = next((c for c in data["contexts"] if c["name"] == args.name), None)
    if ctx is None:
        ctx = {"name": args.name}
        data["contexts"].append(ctx)
    for field in config.FIELDS:
        value = getattr(args, field)
        if value is not None:
            ctx[field] = value
    if args.current or not data.get("current-context"):
        data["current-context"] = args.name
    where = config.save(data)
    return _print(f"context {args.name} set in {where}")


def _use_context(args: argparse.Namespace) -> int:
    data = config.load()
    if not any(c["name"] == args.name for c in data["contexts"]):
        raise ConfigError(f"context {args.name!r} does not exist (gpupool config set-context)")
    data["current-context"] = args.name
    config.save(data)
    return _print(f"switched to context {args.name}")


def _delete_context(args: argparse.Namespace) -> int:
    data = config.load()
    before = len(data["contexts"])
    data["contexts"] = [c for c in data["contexts"] if c["name"] != args.name]
    if len(data["contexts"]) == before:
        raise ConfigError(f"context {args.name!r} does not exist")
    if data.get("current-context") == args.name:
        data.pop("current-context")
    config.save(data)
    return _print(f"context {args.name} deleted")


def _get_contexts(args: argparse.Namespace) -> int:
    data = config.load()
    current = data.get("current-context")
    lines = ["CURRENT   NAME   SERVER   NAMESPACE"]
    rows = [
        [
            "*" if c["name"] == current else "",
            c["name"],
            c.get("server") or "-",
            c.get("namespace") or "-",
        ]
        for c in data["contexts"]
    ]
    widths = [
        max(len(r[i]) for r in [["CURRENT", "NAME", "SERVER", "NAMESPACE"], *rows])
        for i in range(4)
    ]
    lines = [
        "   ".join(
            h.ljust(w)
            for h, w in zip(["CURRENT", "NAME", "SERVER", "NAMESPACE"], widths, strict=True)
        ).rstrip()
    ]
    lines += ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return _print("\n".join(lines))


BASH = """\
# gpupool completion (bash; zsh after bashcompinit)
_gpupool() {
    local cur prev words cword
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    local commands="%(commands)s"
    local kinds="%(kinds)s"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$commands --version --debug --help" -- "$cur"))
        return
    fi
    case "$prev" in
        -f|--filename) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -o|--output) COMPREPLY=($(compgen -W "json yaml wide name jsonpath= custom-columns=" \\
                         -- "$cur")); return ;;
        --context) COMPREPLY=($(compgen -W "$(gpupool config get-contexts 2>/dev/null \\
                         | awk 'NR>1 {print ($1=="*") ? $2 : $1}')" -- "$cur")); return ;;
    esac
    case "${COMP_WORDS[1]}" in
        get) COMPREPLY=($(compgen -W "$kinds -n -A -a -l -o -w --phase --queue --sort-by \\
                 --no-headers --server --token --context" -- "$cur")) ;;
        describe) COMPREPLY=($(compgen -W "job node queue" -- "$cur")) ;;
        cancel|delete) COMPREPLY=($(compgen -W "job -n -o --server --token --context" \\
                 -- "$cur")) ;;
        config) COMPREPLY=($(compgen -W "set-context use-context get-contexts \\
                 delete-context current-context" -- "$cur")) ;;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -W "-f -n -o --server --token --context --help" -- "$cur")) ;;
    esac
}
complete -o default -F _gpupool gpupool
"""


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(BASH % {"commands": " ".join(COMMANDS), "kinds": " ".join(KINDS)})
    return 0
