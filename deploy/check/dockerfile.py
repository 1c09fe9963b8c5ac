#!/usr/bin/env python3
"""Static checks of the Dockerfile that need no Docker engine:
every COPY source exists in the build context and is not excluded by .dockerignore (build/image/,
which scripts/image fills with host binaries, need only be let through); each image stage (the
final one and `host`), with the stages it builds FROM, installs only `scripts/install-deps
--runtime`, runs as a non-root USER, has a HEALTHCHECK and the ENTRYPOINT wisp-entrypoint, and
never installs build tools.

  dockerfile.py REPO_ROOT
"""
import fnmatch
import os
import re
import shlex
import sys


def main(argv):
    root = argv[0] if argv else "."
    lines, buf = [], ""
    for raw in open(os.path.join(root, "Dockerfile"), encoding="utf-8"):
        s = raw.rstrip("\n")
        if not buf and (not s.strip() or s.lstrip().startswith("#")):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        lines.append(buf + s)
        buf = ""
    ignore = [l.strip() for l in open(os.path.join(root, ".dockerignore"), encoding="utf-8")
              if l.strip() and not l.startswith("#")]

    def matches(path, p):
        p = p.rstrip("/")
        return (fnmatch.fnmatch(path, p) or path.startswith(p + "/")
                or fnmatch.fnmatch(path, p.lstrip("*/"))
                or any(fnmatch.fnmatch(path[:i], p) for i, ch in enumerate(path) if ch == "/"))

    def ignored(path):  # the last matching pattern wins; "!" lets a path through again
        verdict = False
        for p in ignore:
            if matches(path.rstrip("/"), p.lstrip("!")):
                verdict = not p.startswith("!")
        return verdict

    problems, stages = [], []
    for l in lines:
        instr, _, rest = l.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append({"from": words[0], "name": name, "lines": []})
            continue
        if not stages:
            if instr != "ARG":
                problems.append(f"{instr} before the first FROM")
            continue
        stages[-1]["lines"].append((instr, rest))
        if instr == "COPY" and "--from=" not in rest:
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            for src in parts[:-1]:
                if src == ".":
                    continue
                if src.startswith("build/image/"):  # made by scripts/image before the build
                    if ignored(src):
                        problems.append(f"COPY {src}: excluded by .dockerignore")
                    continue
                if not os.path.exists(os.path.join(root, src)):
                    problems.append(f"COPY {src}: no such file in the build context")
                elif ignored(src):
                    problems.append(f"COPY {src}: excluded by .dockerignore")
    if len(stages) < 2:
        problems.append("want a multi-stage build (build + runtime)")
    by_name = {st["name"]: st for st in stages if st["name"]}

    def effective(st):  # the stage's lines after those of the stages it builds FROM
        parent = by_name.get(st["from"])
        return (effective(parent) if parent else []) + st["lines"]

    images = [stages[-1]] + [st for st in stages[:-1] if st["name"] == "host"]
    for image in (images if len(stages) >= 2 else []):
        final = effective(image)
        label = f"stage {image['name'] or len(stages)}: "
        runs = " ".join(r for i, r in final if i == "RUN")
        if "install-deps --runtime" not in runs:
            problems.append(label + "does not run scripts/install-deps --runtime")
        if re.search(r"install-deps(?!\s+--runtime)", runs):
            problems.append(label + "runs install-deps without --runtime")
        for tool in ("build-essential", "cmake", "ninja-build", "g++", "gcc", "-dev "):
            if tool in runs:
                problems.append(label + f"installs build tool {tool.strip()}")
        users = [r for i, r in final if i == "USER"]
        if not users or users[-1].split(":")[0] in ("0", "root"):
            problems.append(label + "must end with a non-root USER")
        if not any(i == "HEALTHCHECK" for i, _ in final):
            problems.append(label + "has no HEALTHCHECK")
        entry = [r for i, r in final if i == "ENTRYPOINT"]
        if not entry or "wisp-entrypoint" not in entry[-1]:
            problems.append(label + "has no ENTRYPOINT wisp-entrypoint (args-only specs need it)")
    for st in stages:
        if not all("install-deps" in r for i, r in st["lines"] if i == "RUN" and "apt-get install" in r):
            problems.append(f"stage {st['name']} installs packages outside scripts/install-deps")
    for p in problems:
        print(f"Dockerfile: {p}")
    print(f"dockerfile: {len(stages)} stages, {len(lines)} instructions; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
