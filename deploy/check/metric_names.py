#!/usr/bin/env python3
"""Checks that every metric a Prometheus rule or a Grafana dashboard queries is in the contract
(deploy/metrics.txt, which mirrors the metric names of the shared brief) or is a recording rule.

  metric_names.py CONTRACT RULES_FILE DASHBOARD_DIR
  metric_names.py --exported CONTRACT RULES_FILE DASHBOARD_DIR METRICS_FILE...
      also checks that every contract family queried is exported in one of the METRICS_FILEs
      (Prometheus text format, e.g. saved /metrics of each running service).
"""
import glob
import json
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from promql_names import load_contract, metric_names, series_names  # noqa: E402


def dashboard_exprs(path):
    d = json.load(open(path, encoding="utf-8"))
    out = []

    def walk(panels):
        for p in panels or []:
            for t in p.get("targets", []) or []:
                if t.get("expr"):
                    out.append((f"panel {p.get('title', '?')!r}", t["expr"]))
            walk(p.get("panels"))
    walk(d.get("panels"))
    for v in (d.get("templating") or {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and isinstance(q, str):
            m = re.match(r"\s*label_values\((.*)\)\s*$", q)
            if m:
                inner = m.group(1)
                sel = inner.rsplit(",", 1)[0] if "," in inner else ""
                if sel.strip():
                    out.append((f"variable {v.get('name')}", sel))
            else:
                out.append((f"variable {v.get('name')}", q))
    return out


def main(argv):
    exported_mode = argv[:1] == ["--exported"]
    if exported_mode:
        argv = argv[1:]
    if len(argv) < 3 or (exported_mode and len(argv) < 4):
        print(__doc__, file=sys.stderr)
        return 2
    contract_path, rules_path, dash_dir = argv[:3]
    contract = load_contract(contract_path)
    series = series_names(contract)
    rules = yaml.safe_load(open(rules_path, encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}

    uses = []  # (where, expr)
    for g in rules["groups"]:
        for r in g["rules"]:
            uses.append((f"{rules_path}: {r.get('record') or r.get('alert')}", r["expr"]))
    dashboards = sorted(glob.glob(os.path.join(dash_dir, "*.json")))
    for path in dashboards:
        uses += [(f"{path}: {w}", e) for w, e in dashboard_exprs(path)]

    problems, families = [], set()
    for where, expr in uses:
        for name in sorted(metric_names(expr)):
            if name in recorded:
                continue
            if name in series:
                families.add(series[name])
                continue
            problems.append(f"{where}: metric {name} is neither in {contract_path} nor a recording rule")

    if exported_mode:
        exported = set()
        for f in argv[3:]:
            for line in open(f, encoding="utf-8", errors="replace"):
                m = re.match(r"#\s*TYPE\s+(\S+)", line) or re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)", line)
                if m:
                    exported.add(m.group(1))
        exported_families = {series.get(n, n) for n in exported}
        for fam in sorted(families - exported_families):
            problems.append(f"metric {fam} is queried by a rule or dashboard but no service exports it")

    for p in problems:
        print(p)
    print(f"metric-names: {len(uses)} queries in {rules_path} and {len(dashboards)} dashboards use "
          f"{len(families)} contract metrics and {len(recorded)} recording rules; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
