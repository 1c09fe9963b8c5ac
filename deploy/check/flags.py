#!/usr/bin/env python3
"""Checks that every wisp binary the compose file and the Helm chart run exists in BIN_DIR and
accepts every flag, environment setting (WISP_<FLAG>) and subcommand they give it, by reading the
binary's own `--help`, and that none is given a secret on its command line.

  flags.py BIN_DIR COMPOSE_CONFIG_YAML MANIFESTS_JSON...

COMPOSE_CONFIG_YAML is the output of `docker-compose config` (anchors and variables resolved);
each MANIFESTS_JSON is a JSON array of rendered chart objects.
"""
import json
import os
import re
import subprocess
import sys

import yaml

WISP_BINARIES = {"wisp-gateway", "wisp-policy", "wisp-token", "wisp-populator", "wisp-sidecar", "wispctl"}
_help_cache = {}


def help_words(bin_dir, binary, command=None):
    key = (binary, command)
    if key in _help_cache:
        return _help_cache[key]
    path = os.path.join(bin_dir, binary)
    if not os.access(path, os.X_OK):
        _help_cache[key] = None
        return None
    try:
        p = subprocess.run([path] + ([command] if command else []) + ["--help"], capture_output=True,
                           text=True, timeout=20, stdin=subprocess.DEVNULL)
        text = p.stdout + p.stderr
        ok = p.returncode == 0
    except subprocess.TimeoutExpired:
        text, ok = "", False
    # Secrets (--nats-password, ...) are accepted only from the environment or a file; their help
    # block says "Not taken on the command line".
    secrets = {m.group(1) for m in re.finditer(r"^    --([a-z0-9-]+)[^\n]*\n((?:        [^\n]*\n)*)",
                                                text, re.M)
               if "Not taken on the command line" in m.group(2)}
    words = {"flags": set(re.findall(r"--([a-z0-9][a-z0-9-]*)", text)),
             "words": set(re.findall(r"[a-z][a-z0-9-]*", text)),
             "secrets": secrets, "ok": ok, "text": text}
    _help_cache[key] = words
    return words


def env_to_flag(name):
    return name[len("WISP_"):].lower().replace("_", "-")


def check(where, argv, env, bin_dir, problems, checked):
    if not argv:
        return
    binary = os.path.basename(argv[0])
    if binary not in WISP_BINARIES:
        return
    h = help_words(bin_dir, binary)
    if h is None:
        problems.append(f"{where}: {binary} is not an executable in {bin_dir}")
        return
    if not h["ok"]:
        problems.append(f"{where}: `{binary} --help` did not exit 0")
        return
    args = argv[1:]
    top = h
    # A CLI with commands (wispctl COMMAND [OPTIONS]): the options are those of the command.
    if args and not args[0].startswith("-") and re.search(r"^COMMANDS", h.get("text", ""), re.M):
        if args[0] not in h["words"]:
            problems.append(f"{where}: {binary}: command {args[0]!r} is not in its --help")
            return
        h = help_words(bin_dir, binary, args[0])
        if h is None or not h["ok"]:
            problems.append(f"{where}: `{binary} {args[0]} --help` did not exit 0")
            return
        args = args[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name = a[2:].split("=", 1)[0]
            if name not in h["flags"]:
                problems.append(f"{where}: {binary} does not accept --{name} (not in its --help)")
            elif name in h["secrets"]:
                problems.append(f"{where}: {binary} --{name} puts a secret on the command line "
                                f"(use --{name}-file or its environment variable)")
            if "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # `--flag value`: the value is not a subcommand
        elif a.startswith("-"):
            problems.append(f"{where}: {binary}: short flag {a}; use --long-name=value")
        elif a not in h["words"]:
            problems.append(f"{where}: {binary}: subcommand or word {a!r} is not in its --help")
        i += 1
    for e in env:
        # A CLI documents variables its other commands read under ENVIRONMENT of its top help.
        if e.startswith("WISP_") and env_to_flag(e) not in h["flags"] and e not in top["text"]:
            problems.append(f"{where}: {binary}: environment {e} names no flag (--{env_to_flag(e)})")
    checked.add(binary)


def as_list(v):
    if v is None:
        return []
    if isinstance(v, str):
        return v.split()
    return [str(x) for x in v]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir, compose_path, manifests = argv[0], argv[1], argv[2:]
    problems, checked, uses = [], set(), 0
    compose = yaml.safe_load(open(compose_path, encoding="utf-8"))
    for name, svc in (compose.get("services") or {}).items():
        cmd = as_list(svc.get("entrypoint")) + as_list(svc.get("command"))
        env = svc.get("environment") or {}
        env = list(env) if isinstance(env, dict) else [e.split("=", 1)[0] for e in env]
        if cmd and os.path.basename(cmd[0]) in WISP_BINARIES:
            uses += 1
        check(f"docker-compose.yml service {name}", cmd, env, bin_dir, problems, checked)
    for path in manifests:
        for obj in json.load(open(path, encoding="utf-8")):
            if not obj:
                continue
            spec = (obj.get("spec") or {}).get("template", {}).get("spec")
            if obj.get("kind") == "Pod":
                spec = obj.get("spec")
            if not spec:
                continue
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                cmd = as_list(c.get("command")) + as_list(c.get("args"))
                # Kubernetes expands $(VAR) from the container's env; the flag name is what matters.
                env = [e["name"] for e in c.get("env") or []]
                if cmd and os.path.basename(cmd[0]) in WISP_BINARIES:
                    uses += 1
                where = f"{os.path.basename(path)} {obj['kind']}/{obj['metadata']['name']} container {c['name']}"
                check(where, cmd, env, bin_dir, problems, checked)
    for p in problems:
        print(p)
    print(f"flags: {uses} wisp containers checked against --help of {len(checked)} binaries "
          f"({', '.join(sorted(checked))}); {len(problems)} problem(s)")
    return 1 if problems or uses == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
