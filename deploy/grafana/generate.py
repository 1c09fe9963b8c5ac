#!/usr/bin/env python3
"""Writes wisp's Grafana dashboards (deploy/grafana/dashboards/*.json) from this one description,
so the five dashboards share layout, datasource variable and units. Edit here, then run
`deploy/grafana/generate.py` (scripts/check-deploy fails when the JSON and this file disagree).
Only metric names from deploy/metrics.txt and recording rules of deploy/prometheus/wisp.rules.yml.

  generate.py [OUT_DIR]
"""
import json, os, sys
DS = {"type": "prometheus", "uid": "${datasource}"}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards")

class D:
    def __init__(s, uid, title, desc, tags):
        s.uid, s.title, s.desc, s.tags = uid, title, desc, tags
        s.panels, s.y, s.x, s.id, s.rowh = [], 0, 0, 1, 0
    def row(s, title):
        s.newline()
        s.panels.append({"type": "row", "title": title, "id": s.id, "collapsed": False,
                         "gridPos": {"h": 1, "w": 24, "x": 0, "y": s.y}, "panels": []})
        s.id += 1; s.y += 1
    def newline(s):
        if s.x: s.y += s.rowh; s.x = 0; s.rowh = 0
    def panel(s, kind, title, targets, w=12, h=8, unit="short", desc="", **extra):
        if s.x + w > 24: s.newline()
        p = {"type": kind, "title": title, "id": s.id, "datasource": DS, "description": desc,
             "gridPos": {"h": h, "w": w, "x": s.x, "y": s.y},
             "targets": [dict({"refId": chr(65 + i), "datasource": DS, "expr": e, "legendFormat": l},
                              **({"format": "heatmap"} if kind == "heatmap" else {}))
                         for i, (e, l) in enumerate(targets)],
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "options": {}}
        if kind == "timeseries":
            p["options"] = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
                            "tooltip": {"mode": "multi"}}
        if kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "background", "graphMode": "none"}
        p["fieldConfig"]["defaults"].update(extra.pop("defaults", {}))
        p.update(extra)
        s.panels.append(p); s.id += 1
        s.x += w; s.rowh = max(s.rowh, h)
    def write(s):
        d = {"uid": s.uid, "title": s.title, "description": s.desc, "tags": ["wisp"] + s.tags,
             "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": False,
             "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
             "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                      "query": "prometheus", "current": {}, "hide": 0}]},
             "links": [{"title": "wisp dashboards", "type": "dashboards", "tags": ["wisp"], "asDropdown": True}],
             "annotations": {"list": []}, "panels": s.panels}
        with open(os.path.join(out, s.uid + ".json"), "w") as f:
            json.dump(d, f, indent=2); f.write("\n")

R = "$__rate_interval"
thr_ratio = {"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}, {"color": "orange", "value": 0.01}, {"color": "red", "value": 0.05}]}}
conn = {"thresholds": {"mode": "absolute", "steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}]},
        "mappings": [{"type": "value", "options": {"0": {"text": "disconnected"}, "1": {"text": "connected"}}}]}

# 1. Overview
d = D("wisp-overview", "wisp / Overview", "Health of every wisp service at a glance: bus, admission, tokens, STS, population.", ["overview"])
d.row("Services")
d.panel("table", "Running versions", [("max by (service, version, instance) (wisp_build_info)", "")], w=12, h=7,
        desc="wisp_build_info of every process that Prometheus scrapes.",
        transformations=[{"id": "labelsToFields", "options": {}}])
d.panel("stat", "NATS connection", [("max by (instance) (wisp_bus_connected)", "{{instance}}")], w=12, h=7, defaults=conn,
        desc="1 when the process is connected to NATS (alert WispBusDisconnected).")
d.row("Traffic")
d.panel("timeseries", "Admission requests by outcome", [(f"sum by (outcome) (rate(wisp_gateway_admission_requests_total[{R}]))", "{{outcome}}")], w=8, unit="reqps")
d.panel("timeseries", "Admissions without a verdict", [("wisp:gateway_admission_error_ratio:rate5m", "{{webhook}}")], w=8, unit="percentunit",
        desc="Share answered by error or by the failure mode (alert WispWebhookErrorRatioHigh at 5%).")
d.panel("timeseries", "Admission p99 latency", [("wisp:gateway_admission_duration_seconds:p99_5m", "{{webhook}}")], w=8, unit="s")
d.panel("timeseries", "Tokens issued", [(f"sum by (alg) (rate(wisp_token_issued_total[{R}]))", "{{alg}}")], w=8, unit="ops")
d.panel("timeseries", "STS exchanges by outcome", [(f"sum by (outcome) (rate(wisp_gateway_sts_requests_total[{R}]))", "{{outcome}}")], w=8, unit="reqps")
d.panel("timeseries", "Population jobs by result", [(f"sum by (result) (increase(wisp_populator_jobs_total[{R}]))", "{{result}}")], w=8)
d.row("Resources")
d.panel("timeseries", "Resident memory", [("process_resident_memory_bytes", "{{instance}}")], w=12, unit="bytes")
d.panel("timeseries", "Uptime", [("time() - process_start_time_seconds", "{{instance}}")], w=12, unit="s")
d.write()

# 2. Admission
d = D("wisp-admission", "wisp / Admission", "The admission webhooks (/mutate, /validate) and the policy rules behind them.", ["admission"])
d.row("Webhooks")
d.panel("timeseries", "Requests by webhook and outcome", [(f"sum by (webhook, outcome) (rate(wisp_gateway_admission_requests_total[{R}]))", "{{webhook}} {{outcome}}")], w=12, unit="reqps")
d.panel("timeseries", "Requests by kind", [(f"sum by (kind) (rate(wisp_gateway_admission_requests_total[{R}]))", "{{kind}}")], w=12, unit="reqps")
d.panel("timeseries", "Error and failure-mode ratio", [("wisp:gateway_admission_error_ratio:rate5m", "{{webhook}}")], w=8, unit="percentunit", defaults=thr_ratio)
d.panel("timeseries", "Failure-mode answers", [(f"sum by (webhook, outcome) (rate(wisp_gateway_admission_requests_total{{outcome=~\"error|fail_open|fail_closed\"}}[{R}]))", "{{webhook}} {{outcome}}")], w=8, unit="reqps",
        desc="fail_closed: denied because the bus was down or slow; fail_open: admitted unchecked.")
d.panel("timeseries", "Latency p50 / p99", [("wisp:gateway_admission_duration_seconds:p50_5m", "p50 {{webhook}}"), ("wisp:gateway_admission_duration_seconds:p99_5m", "p99 {{webhook}}")], w=8, unit="s")
d.panel("heatmap", "Latency distribution", [(f"sum by (le) (rate(wisp_gateway_admission_duration_seconds_bucket[{R}]))", "{{le}}")], w=24, unit="s",
        options={"calculate": False, "yAxis": {"unit": "s"}})
d.row("Policy")
d.panel("timeseries", "Rule decisions", [(f"sum by (rule, outcome) (rate(wisp_policy_rule_decisions_total[{R}]))", "{{rule}} {{outcome}}")], w=12, unit="ops")
d.panel("timeseries", "Policy call latency p99 (bus)", [(f"histogram_quantile(0.99, sum by (endpoint, le) (rate(wisp_bus_request_duration_seconds_bucket{{service=\"wisp-policy\"}}[{R}])))", "{{endpoint}}")], w=12, unit="s")
d.write()

# 3. Tokens and STS
d = D("wisp-tokens", "wisp / Tokens and STS", "Token issuance, signing keys, STS exchange, OIDC discovery and token volume rotation on the nodes.", ["tokens", "sts"])
d.row("Issuance")
d.panel("timeseries", "Issued by algorithm", [(f"sum by (alg) (rate(wisp_token_issued_total[{R}]))", "{{alg}}")], w=8, unit="ops")
d.panel("timeseries", "Issue errors by reason", [(f"sum by (reason) (rate(wisp_token_issue_errors_total[{R}]))", "{{reason}}")], w=8, unit="ops")
d.panel("timeseries", "Issue error ratio", [("wisp:token_issue_error_ratio:rate5m", "error ratio")], w=8, unit="percentunit", defaults=thr_ratio)
d.panel("timeseries", "Reviews by result", [(f"sum by (result) (rate(wisp_token_reviews_total[{R}]))", "{{result}}")], w=12, unit="ops")
d.panel("timeseries", "OIDC discovery and JWKS requests", [(f"sum by (path) (rate(wisp_gateway_oidc_requests_total[{R}]))", "{{path}}")], w=12, unit="reqps")
d.row("Signing keys")
d.panel("timeseries", "Signing key age vs rotation period", [("max by (instance) (wisp_token_signing_key_age_seconds)", "age {{instance}}"), ("max by (instance) (wisp_token_key_rotation_period_seconds)", "period {{instance}}")], w=16, unit="s",
        desc="Alert WispSigningKeyRotationOverdue fires when the age passes 1.5x the period.")
d.panel("stat", "Key rotations (24h)", [("sum(increase(wisp_token_key_rotations_total[24h]))", "rotations")], w=8)
d.row("STS")
d.panel("timeseries", "Gateway STS requests by outcome", [(f"sum by (outcome) (rate(wisp_gateway_sts_requests_total[{R}]))", "{{outcome}}")], w=8, unit="reqps")
d.panel("timeseries", "Exchanges by outcome (wisp-token)", [(f"sum by (outcome) (rate(wisp_token_exchanges_total[{R}]))", "{{outcome}}")], w=8, unit="ops",
        desc="ok, or the RFC 6749 error code returned.")
d.panel("timeseries", "STS failure ratio", [("wisp:gateway_sts_failure_ratio:rate5m", "failure ratio")], w=8, unit="percentunit", defaults=thr_ratio)
d.row("Token volumes on nodes")
d.panel("timeseries", "Token volumes", [("sum by (instance) (wisp_gateway_token_volumes)", "{{instance}}")], w=8)
d.panel("timeseries", "Rotations by result", [(f"sum by (instance, result) (rate(wisp_gateway_token_rotations_total[{R}]))", "{{instance}} {{result}}")], w=8, unit="ops")
d.panel("timeseries", "Rotation failures (15m)", [("sum by (instance) (increase(wisp_gateway_token_rotations_total{result=\"error\"}[15m]))", "{{instance}}")], w=8,
        desc="Alert WispTokenRotationFailures fires at 3 in 15m on one node.")
d.write()

# 4. Volumes and population
d = D("wisp-volumes", "wisp / Volumes and population", "Population jobs (import, blank, clone), their progress and the CSI calls that create and publish volumes.", ["volumes", "populator", "csi"])
d.row("Population")
d.panel("bargauge", "Progress by volume", [("wisp_populator_progress_ratio", "{{volume}}")], w=12, h=9, unit="percentunit",
        defaults={"min": 0, "max": 1}, options={"orientation": "horizontal", "displayMode": "gradient",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}})
d.panel("stat", "Jobs in progress", [("sum(wisp_populator_jobs_in_progress)", "in progress")], w=6, h=9)
d.panel("stat", "Failed jobs (24h)", [("sum(increase(wisp_populator_jobs_total{result=\"failed\"}[24h]))", "failed")], w=6, h=9,
        defaults={"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}, {"color": "red", "value": 1}]}})
d.panel("timeseries", "Jobs by result", [("wisp:populator_jobs:rate5m", "{{result}}")], w=8, unit="ops")
d.panel("timeseries", "Throughput", [(f"sum(rate(wisp_populator_bytes_read_total[{R}]))", "read (source)"), (f"sum(rate(wisp_populator_bytes_written_total[{R}]))", "written (volume)")], w=8, unit="Bps")
d.panel("timeseries", "Job duration p50 / p99", [(f"histogram_quantile(0.5, sum by (le) (rate(wisp_populator_job_duration_seconds_bucket[{R}])))", "p50"), (f"histogram_quantile(0.99, sum by (le) (rate(wisp_populator_job_duration_seconds_bucket[{R}])))", "p99")], w=8, unit="s")
d.row("CSI")
d.panel("timeseries", "CSI calls by method and code", [(f"sum by (method, code) (rate(wisp_gateway_csi_requests_total[{R}]))", "{{method}} {{code}}")], w=12, unit="reqps")
d.panel("timeseries", "CSI latency p99", [(f"histogram_quantile(0.99, sum by (method, le) (rate(wisp_gateway_csi_duration_seconds_bucket[{R}])))", "{{method}}")], w=12, unit="s")
d.write()

# 5. Bus
d = D("wisp-bus", "wisp / Bus health", "NATS connectivity and request/reply traffic of every service, served and called.", ["bus", "nats"])
d.row("Connection")
d.panel("state-timeline", "Connected to NATS", [("max by (instance) (wisp_bus_connected)", "{{instance}}")], w=16, h=7, defaults=conn)
d.panel("timeseries", "Reconnects", [(f"sum by (instance) (increase(wisp_bus_reconnects_total[{R}]))", "{{instance}}")], w=8, h=7)
d.row("Served (by service and endpoint)")
d.panel("timeseries", "Requests by code", [(f"sum by (service, endpoint, code) (rate(wisp_bus_requests_total[{R}]))", "{{service}} {{endpoint}} {{code}}")], w=12, unit="reqps")
d.panel("timeseries", "Handler latency p99", [("wisp:bus_request_duration_seconds:p99_5m", "{{service}} {{endpoint}}")], w=12, unit="s")
d.row("Called (by subject)")
d.panel("timeseries", "Client requests by code", [(f"sum by (subject, code) (rate(wisp_bus_client_requests_total[{R}]))", "{{subject}} {{code}}")], w=8, unit="reqps")
d.panel("timeseries", "Unavailable / timed out ratio", [("wisp:bus_client_unavailable_ratio:rate5m", "{{subject}}")], w=8, unit="percentunit", defaults=thr_ratio,
        desc="Alert WispBusRequestsUnavailable fires at 10%.")
d.panel("timeseries", "Round trip p99", [(f"histogram_quantile(0.99, sum by (subject, le) (rate(wisp_bus_client_request_duration_seconds_bucket[{R}])))", "{{subject}}")], w=8, unit="s")
d.write()
