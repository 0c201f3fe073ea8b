"""What the API server refuses in an object's metadata, checked offline: names, namespaces,
label and annotation syntax and lengths (apimachinery's ``ValidateObjectMeta``, the kind's name
rule for the kinds batchgate knows). ``batchgate check`` reports these so that a green check
means the cluster would take the object; nothing else of the API server's validation (field
schemas, quantities, immutable fields, quota, RBAC, its admission plugins) is repeated here.

Pure: an object in, the problems in the API server's words out. The patterns are
Kubernetes' own (``k8s.io/apimachinery/pkg/util/validation``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from . import workloads

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
DNS_1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = rf"({QUALIFIED_NAME})?"
MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB

_LABEL = re.compile(DNS_LABEL)
_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
_DNS_1035 = re.compile(DNS_1035_LABEL)
_QUALIFIED = re.compile(QUALIFIED_NAME)
_VALUE = re.compile(LABEL_VALUE)

# The name rule of the kinds batchgate knows (others have their own, e.g. RBAC names take ':',
# and are not checked): (rule, longest name). A Job's name becomes the value of its pods'
# batch.kubernetes.io/job-name label (63); a CronJob's Jobs get an 11-character suffix (52).
NAME_RULES: dict[tuple[str, str], tuple[str, int]] = {
    ("", "Pod"): ("subdomain", 253), ("", "ConfigMap"): ("subdomain", 253), ("", "Secret"): ("subdomain", 253),
    ("", "ServiceAccount"): ("subdomain", 253), ("", "Service"): ("dns-1035", 63), ("", "Namespace"): ("label", 63),
    ("batch", "Job"): ("subdomain", 63), ("", "Job with manualSelector"): ("subdomain", 253), ("batch", "CronJob"): ("subdomain", 52),
    ("apps", "Deployment"): ("subdomain", 253), ("apps", "ReplicaSet"): ("subdomain", 253),
    ("apps", "StatefulSet"): ("subdomain", 253), ("apps", "DaemonSet"): ("subdomain", 253),
    ("batchgate.io", "ScavengerJob"): ("subdomain", 253), ("batchgate.io", "MaintenanceWindow"): ("subdomain", 253),
    ("scheduling.k8s.io", "PriorityClass"): ("subdomain", 253),
}
LONGEST_WHY = {
    "Job": " (it becomes the batch.kubernetes.io/job-name label in spec.template.labels)",
    "CronJob": " (its Jobs' names add 11 characters)",
}
_RULE_TEXT = {
    "subdomain": ("a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.', starting and "
                  "ending with a letter or digit)", _SUBDOMAIN),
    "label": ("a lowercase RFC 1123 label (lowercase letters, digits and '-', starting and ending with a "
              "letter or digit)", _LABEL),
    "dns-1035": ("a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending "
                 "with a letter or digit)", _DNS_1035),
}


def label_key_problem(key: Any) -> str | None:
    """Why the API server refuses ``key`` as a label or annotation key (a qualified name:
    an optional DNS subdomain prefix and '/', then a name of at most 63 characters), or None."""
    if not isinstance(key, str):
        return "must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return "the prefix must be a lowercase DNS subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _QUALIFIED.fullmatch(name):
        return ("the name part must be at most 63 characters of letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def label_value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > 63 or not _VALUE.fullmatch(value):
        return ("must be empty or at most 63 characters of letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def name_problem(group: str, kind: str, name: str, *, generated: bool = False) -> str | None:
    """Why the API server refuses ``name`` for a ``kind`` (None also for a kind whose rule is not
    known here). ``generated``: a generateName prefix, checked as the API server does (a trailing
    '-' stands for the random suffix)."""
    rule = NAME_RULES.get((group, kind))
    if rule is None:
        return None
    how, longest = rule
    text, pattern = _RULE_TEXT[how]
    checked = name[:-1] + "a" if generated and name.endswith("-") else name
    if len(name) > longest:
        return f"must be no more than {longest} characters" + LONGEST_WHY.get(kind, "")
    if not pattern.fullmatch(checked):
        return f"must be {text}"
    return None


def _metas(obj: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every metadata of ``obj`` the API server validates as ObjectMeta: its own, and those of
    the templates of a workload kind (a CronJob's Job template, the pod template)."""
    shape = workloads.shape_of(str(obj.get("apiVersion") or "").rpartition("/")[0], str(obj.get("kind") or ""))
    for path in workloads.label_places(shape):
        yield ".".join(map(str, path)), workloads.dig(obj, path)


def problems(obj: dict[str, Any], *, namespaced: bool = True) -> list[str]:
    """The API server's objections to ``obj``'s metadata and to that of its templates (a
    workload's pod template), each as ``field: Invalid value: ...: message``."""
    out: list[str] = []
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        name, generate = meta.get("name"), meta.get("generateName")
        if (group, kind) == ("batch", "Job") and workloads.dig(obj, ("spec", "manualSelector")) is True:
            kind = "Job with manualSelector"  # its name labels no pod: the general rule
            group = ""
        if isinstance(name, str) and name:
            if (p := name_problem(group, kind, name)) is not None:
                out.append(f"metadata.name: Invalid value: {name!r}: {p}")
        elif isinstance(generate, str) and generate \
                and (p := name_problem(group, kind, generate, generated=True)) is not None:
            out.append(f"metadata.generateName: Invalid value: {generate!r}: {p}")
        ns = meta.get("namespace")
        if namespaced and isinstance(ns, str) and ns and (len(ns) > 63 or not _LABEL.fullmatch(ns)):
            out.append(f"metadata.namespace: Invalid value: {ns!r}: must be a lowercase RFC 1123 label")
    for where, m in _metas(obj):
        if not isinstance(m, dict):
            continue
        labels, annotations = m.get("labels"), m.get("annotations")
        for key, value in (labels or {}).items() if isinstance(labels, dict) else ():
            if (p := label_key_problem(key)) is not None:
                out.append(f"{where}.labels: Invalid value: {key!r}: {p}")
            if (p := label_value_problem(value)) is not None:
                out.append(f"{where}.labels: Invalid value: {value!r}: {p}")
        if isinstance(annotations, dict):
            for key in annotations:
                # the API server checks annotation keys lowercased
                if (p := label_key_problem(key.lower() if isinstance(key, str) else key)) is not None:
                    out.append(f"{where}.annotations: Invalid value: {key!r}: {p}")
            size = sum(len(str(k).encode()) + len((v if isinstance(v, str) else json.dumps(v)).encode())
                       for k, v in annotations.items())
            if size > MAX_ANNOTATIONS_BYTES:
                out.append(f"{where}.annotations: Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes")
    return out
