#!/usr/bin/env python3
"""Static checks of the Dockerfile that need no Docker engine:
every COPY source exists in the build context and is not excluded by .dockerignore; the final
stage installs only `scripts/install-deps --runtime`, runs as a non-root USER, has a HEALTHCHECK,
and never installs build tools.

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

    def ignored(path):
        return any(fnmatch.fnmatch(path, p.rstrip("/")) or path.startswith(p.rstrip("/") + "/")
                   or fnmatch.fnmatch(path, p.rstrip("/").lstrip("*/")) for p in ignore)

    problems, stages = [], []
    for l in lines:
        instr, _, rest = l.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append({"from": rest, "lines": []})
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
                if not os.path.exists(os.path.join(root, src)):
                    problems.append(f"COPY {src}: no such file in the build context")
                elif ignored(src):
                    problems.append(f"COPY {src}: excluded by .dockerignore")
    if len(stages) < 2:
        problems.append("want a multi-stage build (build + runtime)")
    else:
        final = stages[-1]["lines"]
        runs = " ".join(r for i, r in final if i == "RUN")
        if "install-deps --runtime" not in runs:
            problems.append("final stage does not run scripts/install-deps --runtime")
        if re.search(r"install-deps(?!\s+--runtime)", runs):
            problems.append("final stage runs install-deps without --runtime")
        for tool in ("build-essential", "cmake", "ninja-build", "g++", "gcc", "-dev "):
            if tool in runs:
                problems.append(f"final stage installs build tool {tool.strip()}")
        users = [r for i, r in final if i == "USER"]
        if not users or users[-1].split(":")[0] in ("0", "root"):
            problems.append("final stage must end with a non-root USER")
        if not any(i == "HEALTHCHECK" for i, _ in final):
            problems.append("final stage has no HEALTHCHECK")
        if not all("install-deps" in r for i, r in stages[0]["lines"] if i == "RUN" and "apt-get install" in r):
            problems.append("build stage installs packages outside scripts/install-deps")
    for p in problems:
        print(f"Dockerfile: {p}")
    print(f"dockerfile: {len(stages)} stages, {len(lines)} instructions; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
