"""Grafana-managed alerts from the same rule definitions, in Grafana's file-provisioning shape.

grafanalib's AlertRulev9/AlertGroup build the queries and expressions, but they emit the Ruler-API
shape (`grafana_alert: {title, ...}`, `no_data_state: "No Data"`, expressions on datasource "-100"),
which Grafana's provisioning loader rejects ("rule has no title set"). `_provisioning_rule()` flattens
each rule into `AlertRuleV1` (title, condition, data, noDataState, execErrState, for, labels,
annotations) with `__expr__` expressions. Contact point and notification policy files are examples.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import grafanalib.core as G

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.bundle.alerting.rulefile import dump_yaml
from kvoffload_exporter.bundle.alerting.rules import AlertRule, build
from kvoffload_exporter.bundle.grafana.panels import plain_json
from kvoffload_exporter.bundle.settings import DEFAULT, Settings

EXPR_UID = "__expr__"
NO_DATA_STATES = ("OK", "NoData", "Alerting", "KeepLast")
EXEC_ERR_STATES = ("OK", "Error", "Alerting", "KeepLast")
QUERY_RANGE_SECONDS = 600  # relative time range handed to the instant query (PromQL sets its own windows)


def _uid(alert: str) -> str:
    """Stable rule uid (≤ 40 chars): kvoffload-store-without-load."""
    words = re.sub(r"(?<!^)(?=[A-Z][a-z])", "-", alert.removeprefix("KVOffload")).lower()
    return f"kvoffload-{words}"[:40]


def _grafana_template(text: str) -> str:
    # Grafana-managed rules expose query values as $values.<refId>.Value, not Prometheus' $value.
    return text.replace("$value", "$values.B.Value")


def _rule(a: AlertRule, s: Settings) -> G.AlertRulev9:
    """The query returns series only while the alert condition holds: reduce to the last value and
    fire on any number (NaN-free reduce drops gaps). An alert on absence queries what must be present
    instead: any value is fine (the condition never holds on data) and *no data* alerts."""
    presence = bool(a.grafana_presence)
    return G.AlertRulev9(
        title=a.alert,
        uid=_uid(a.alert),
        condition="C",
        triggers=[
            G.Target(expr=a.grafana_presence or a.expr, refId="A", datasource=s.grafana_datasource_uid, instant=True),
            G.AlertExpression(
                refId="B",
                expression="A",
                expressionType=G.EXP_TYPE_REDUCE,
                reduceFunction=G.EXP_REDUCER_FUNC_LAST,
                reduceMode=G.EXP_REDUCER_FUNC_DROP_NN,
            ),
            G.AlertExpression(
                refId="C", expression="$B < 0" if presence else "is_number($B)", expressionType=G.EXP_TYPE_MATH
            ),
        ],
        annotations={
            "summary": a.summary,
            "description": _grafana_template(a.description),
            "runbook_url": a.runbook_url(s.runbook_url),
        },
        labels={"severity": a.severity},
        evaluateFor=a.for_,
        noDataAlertState=G.ALERTRULE_STATE_DATA_ALERTING if presence else G.ALERTRULE_STATE_DATA_OK,
        errorAlertState=G.ALERTRULE_STATE_DATA_ALERTING,
        timeRangeFrom=QUERY_RANGE_SECONDS,
    )


# Any: grafanalib's expression model JSON, filtered by key
def _expression_model(m: dict[str, Any]) -> dict[str, Any]:
    """Keep only what the expression type reads (grafanalib writes every option for every type)."""
    keep = {"refId", "type", "expression", "hide", "intervalMs", "maxDataPoints"}
    if m["type"] == G.EXP_TYPE_REDUCE:
        keep |= {"reducer", "settings"}
    out = {k: v for k, v in m.items() if k in keep}
    out["datasource"] = {"type": "__expr__", "uid": EXPR_UID}
    return out


# Any: grafanalib's ruler JSON, read nested and rewritten
def _provisioning_rule(ruler: dict[str, Any]) -> dict[str, Any]:
    ga = ruler["grafana_alert"]
    data = []
    for q in ga["data"]:
        if q["datasourceUid"] == "-100":  # grafanalib's legacy expression datasource id
            data.append(
                {
                    "refId": q["refId"],
                    "datasourceUid": EXPR_UID,
                    "relativeTimeRange": {"from": 0, "to": 0},
                    "model": _expression_model(q["model"]),
                }
            )
        else:
            model = q["model"]
            data.append(
                {
                    "refId": q["refId"],
                    "datasourceUid": q["datasourceUid"],
                    "relativeTimeRange": q["relativeTimeRange"],
                    "model": {
                        "refId": model["refId"],
                        "expr": model["expr"],
                        "instant": True,
                        "range": False,
                        "editorMode": "code",
                        "intervalMs": 1000,
                        "maxDataPoints": 43200,
                    },
                }
            )
    state = {"No Data": "NoData", "Error": "Error"}
    return {
        "uid": ruler["uid"],
        "title": ga["title"],
        "condition": ga["condition"],
        "data": data,
        "noDataState": state.get(ga["no_data_state"], ga["no_data_state"]),
        # Evaluation errors (Prometheus down) become Grafana's separate DatasourceError alert rather
        # than firing all of these at once.
        "execErrState": "Error",
        "for": ruler["for"],
        "labels": ruler["labels"],
        "annotations": ruler["annotations"],
        "isPaused": False,
    }


# Any: Grafana's provisioning document, nested JSON written as YAML
def provisioning(s: Settings = DEFAULT, selectors: Sequence[Matcher] = ()) -> dict[str, Any]:
    _, alerts = build(s, selectors, inline=True)  # Grafana has no recording rules: inline them
    group = G.AlertGroup(
        name="kvoffload",
        folder=s.grafana_folder,
        evaluateInterval=s.grafana_interval,
        rules=[_rule(a, s) for a in alerts],
    )
    raw = G.AlertFileBasedProvisioning([group]).to_json_data()
    plain = plain_json(raw)
    groups = [
        {
            "orgId": 1,
            "name": g["name"],
            "folder": g["folder"],
            "interval": g["interval"],
            "rules": [_provisioning_rule(r) for r in g["rules"]],
        }
        for g in plain["groups"]
    ]
    return {"apiVersion": plain["apiVersion"], "groups": groups}


CONTACT_POINTS = {
    "apiVersion": 1,
    "contactPoints": [
        {
            "orgId": 1,
            "name": "kvoffload-oncall",
            "receivers": [
                {
                    "uid": "kvoffload-oncall-email",
                    "type": "email",
                    "disableResolveMessage": False,
                    "settings": {"addresses": "llm-oncall@example.com", "singleEmail": True},
                }
            ],
        }
    ],
}

POLICIES = {
    "apiVersion": 1,
    "policies": [
        {
            "orgId": 1,
            "receiver": "kvoffload-oncall",
            "group_by": ["grafana_folder", "alertname", "target"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                {
                    "receiver": "kvoffload-oncall",
                    "object_matchers": [["severity", "=", "critical"]],
                    "repeat_interval": "1h",
                }
            ],
        }
    ],
}

_HEADER = (
    "# Generated by `kvoffload-exporter bundle` (kvoffload_exporter/bundle/grafana/grafana_alerts.py): "
    "Grafana file provisioning,\n# place in provisioning/alerting/. {note}\n"
)


def render(s: Settings = DEFAULT, selectors: Sequence[Matcher] = ()) -> dict[str, str]:
    return {
        "alerts/grafana/kvoffload-alert-rules.yaml": _HEADER.format(
            note=f"Same rules as alerts/kvoffload.rules.yaml; datasource uid {s.grafana_datasource_uid!r}."
        )
        + dump_yaml(provisioning(s, selectors)),
        "alerts/grafana/contact-points.example.yaml": _HEADER.format(note="Example: replace the address.")
        + dump_yaml(CONTACT_POINTS),
        "alerts/grafana/notification-policies.example.yaml": _HEADER.format(
            note="Example: this REPLACES the organisation's whole policy tree."
        )
        + dump_yaml(POLICIES),
    }
