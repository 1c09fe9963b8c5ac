"""Metric names a PromQL expression reads. Shared by the checks in this directory.

Strips what is not a metric name (strings, label matchers, grouping clauses, durations, Grafana
variables, function calls, keywords, numbers) and returns the identifiers that are left.
"""
import re

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
    "unless", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group", "atan2", "inf", "nan", "start", "end",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)')
_MATCHERS = re.compile(r'\{[^}]*\}')
_RANGE = re.compile(r'\[[^\]]*\]')
_GRAFANA_VAR = re.compile(r'\$\{[^}]*\}|\$\w+|\[\[\w+\]\]')
_IDENT = re.compile(r'[A-Za-z_:][A-Za-z0-9_:]*')


def metric_names(expr):
    e = _GRAFANA_VAR.sub(" ", expr)
    e = _STRING.sub(" ", e)
    e = _MATCHERS.sub(" ", e)
    e = _GROUPING.sub(" ", e)
    e = _RANGE.sub(" ", e)
    names = set()
    for m in _IDENT.finditer(e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if word.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"[0-9eE.+-]+", word):
            continue
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # the exponent or unit of a number such as 1e3
        names.add(word)
    return names


def load_contract(path):
    """metrics.txt: `name type [labels...]` per line, # comments. Returns {name: type}."""
    contract = {}
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2 or parts[1] not in ("counter", "gauge", "histogram", "summary", "untyped"):
            raise ValueError(f"{path}: bad line {line!r} (want: name type [labels])")
        contract[parts[0]] = parts[1]
    return contract


def series_names(contract):
    """Every series name the contract's families produce (histogram _bucket/_sum/_count ...)."""
    out = {}
    for name, typ in contract.items():
        out[name] = name
        if typ in ("histogram", "summary"):
            for suffix in ("_bucket", "_sum", "_count"):
                out[name + suffix] = name
    return out
