#!/usr/bin/env python3
"""Assertions on the cohort chart's rendered manifests, for tests/chart/chart_test.sh.

  chart_checks.py split RENDERED BUILTIN MONITORS
      Splits `helm template` output: Prometheus Operator objects (monitoring.coreos.com)
      go to MONITORS, everything else to BUILTIN.
  chart_checks.py check SET OBJECTS_JSON MONITORS RELEASE_NAMESPACE [WATCH_NAMESPACE]
      OBJECTS_JSON is what `kubectl apply --dry-run=server -o json` returned for BUILTIN
      (the API server's view, defaults filled in). Prints PASS/FAIL lines; the exit status is
      the number of failures.

Python's standard library has no YAML parser, so the objects are read as the API server
returns them (JSON), and the monitors, which this cluster may not serve, as text.
"""
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(ROOT, "charts", "cohort")

# The operator's API use (its contract); RBAC must grant exactly this.
EXPECTED_RULES = sorted([
    ("cohort.dev", "coordinatedjobs", ("delete", "get", "list", "watch")),
    ("cohort.dev", "coordinatedjobs/status", ("get", "update")),
    ("cohort.dev", "coordinatedjobs/finalizers", ("update",)),
    ("", "pods", ("create", "delete", "get", "list", "watch")),
    ("", "services", ("create", "get", "list", "watch")),
    ("", "configmaps", ("create", "get", "list", "update", "watch")),
    ("", "persistentvolumeclaims", ("create", "get", "list", "watch")),
    ("", "secrets", ("create", "get", "list", "watch")),
    ("", "events", ("create",)),
    ("networking.k8s.io", "networkpolicies", ("create", "delete", "get", "list", "update", "watch")),
    ("scheduling.x-k8s.io", "podgroups", ("create",)),
    ("scheduling.volcano.sh", "podgroups", ("create",)),
    ("scheduling.k8s.io", "workloads", ("create",)),
    ("scheduling.k8s.io", "podgroups", ("create", "get", "list", "watch")),
    ("kueue.x-k8s.io", "workloads", ("create", "delete", "get", "list", "update", "watch")),
    ("kueue.x-k8s.io", "workloads/status", ("get", "update")),
    ("kueue.x-k8s.io", "workloads/finalizers", ("update",)),
])
# With kueue.mode (not off): the ResourceFlavors admissions name, cluster-wide, and Kueue's
# controller's read access to CoordinatedJobs.
KUEUE_FLAVOR_RULES = [("kueue.x-k8s.io", "resourceflavors", ("get", "list", "watch")),
                      ("kueue.x-k8s.io", "workloadpriorityclasses", ("get",)),
                      ("scheduling.k8s.io", "priorityclasses", ("get", "list"))]
KUEUE_READER_RULES = [("cohort.dev", "coordinatedjobs", ("get", "list", "watch"))]
# spec.coordinator.state.volume Auto: whether the cluster has a default StorageClass.
STORAGE_RULES = [("storage.k8s.io", "storageclasses", ("list",))]


def is_kueue_role(o):
    return o["metadata"]["name"].endswith("-kueue") or o["metadata"]["name"].endswith("-kueue-reader")


def is_storage_role(o):
    return o["metadata"]["name"].endswith("-storage")

failures = 0


def report(ok, what, detail=""):
    global failures
    if ok:
        print(f"PASS {what}")
    else:
        failures += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""))


def split(rendered, builtin, monitors):
    docs = re.split(r"^---\s*$", open(rendered).read(), flags=re.M)
    keep, mon = [], []
    for d in docs:
        if not re.search(r"^kind:", d, re.M):
            continue
        (mon if re.search(r"^apiVersion: monitoring\.coreos\.com/", d, re.M) else keep).append(d)
    if not keep:
        sys.exit(f"split: {rendered} holds no Kubernetes object of a built-in kind")
    open(builtin, "w").write("\n---\n".join(keep))
    open(monitors, "w").write("\n---\n".join(mon))


def rules_of(role):
    out = []
    for r in role.get("rules", []):
        for group in r.get("apiGroups", []):
            for res in r.get("resources", []):
                out.append((group, res, tuple(sorted(r.get("verbs", [])))))
    return sorted(out)


def check(set_name, objects_json, monitors_path, release_ns, watch_ns=""):
    data = json.load(open(objects_json))
    items = data.get("items", [data]) if data.get("kind") == "List" else [data]
    by_kind = {}
    for o in items:
        by_kind.setdefault(o["kind"], []).append(o)
    monitors = open(monitors_path).read() if os.path.exists(monitors_path) else ""
    values = {
        "defaults": {"prefix": "cohort-test", "image": "ghcr.io/cohort/cohort-operator:0.1.0",
                     "coordinator": "ghcr.io/cohort/cohort-coordinator:0.1.0",
                     "sidecar": "ghcr.io/cohort/cohort-sidecar:0.1.0"},
        "custom": {"prefix": "ml-cohort",
                   "image": "registry.example.com/ml/cohort-operator@sha256:"
                            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                   "coordinator": "registry.example.com/ml/cohort-coordinator:0.1.1",
                   "sidecar": "registry.example.com/ml/cohort-sidecar:0.1.1"},
    }
    expect = values.get(set_name, values["defaults"])
    leader = set_name != "minimal"
    lease = "cohort-leader" if set_name == "custom" else f"{expect['prefix']}-operator"
    sa_name = "cohort-operator-external" if set_name == "minimal" else f"{expect['prefix']}-operator"

    # -- The CRD comes with the chart.
    crds = [o["metadata"]["name"] for o in by_kind.get("CustomResourceDefinition", [])]
    report(crds == ["coordinatedjobs.cohort.dev"], f"[{set_name}] the CoordinatedJob CRD is included", crds)

    # -- The Deployment.
    deps = by_kind.get("Deployment", [])
    report(len(deps) == 1, f"[{set_name}] one operator Deployment", len(deps))
    if not deps:
        return
    dep = deps[0]
    pod = dep["spec"]["template"]["spec"]
    containers = pod["containers"]
    report([c["name"] for c in containers] == ["cohort-operator"],
           f"[{set_name}] one container, cohort-operator")
    c = containers[0]
    report(c["image"] == expect["image"], f"[{set_name}] operator image {expect['image']}", c["image"])
    args = c.get("args", [])
    want_args = [
        "--http-listen=0.0.0.0:8080",
        f"--leader-elect={'true' if leader else 'false'}",
        f"--coordinator-image={expect['coordinator']}",
        f"--sidecar-image={expect['sidecar']}",
        f"--workload-liveness={'file' if set_name == 'custom' else 'process'}",
    ]
    if leader:
        want_args += ["--leader-election-namespace=$(POD_NAMESPACE)", f"--leader-election-id={lease}"]
    if set_name == "custom":
        want_args += ["--job-tls=cert-manager", "--job-tls-issuer=ClusterIssuer/cohort-ca"]
    else:
        want_args.append(f"--job-tls={'none' if set_name == 'minimal' else 'operator'}")
        report(not any(a.startswith("--job-tls-issuer") for a in args),
               f"[{set_name}] no --job-tls-issuer without cert-manager", args)
    network_policy = set_name != "minimal"
    want_args.append(f"--network-policy={'true' if network_policy else 'false'}")
    if network_policy:
        metrics_ns = "monitoring" if set_name == "isolation" else release_ns
        want_args += ["--operator-namespace=$(POD_NAMESPACE)", f"--metrics-namespace={metrics_ns}"]
        # The labels the jobs' NetworkPolicies select the operator by: its pods carry them.
        flag = [a for a in args if a.startswith("--operator-pod-labels=")]
        labels = dict(kv.split("=", 1) for kv in flag[0].split("=", 1)[1].split(",")) if flag else {}
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        report(labels and all(pod_labels.get(k) == v for k, v in labels.items())
               and set(labels) >= {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                   "app.kubernetes.io/component"},
               f"[{set_name}] --operator-pod-labels names the operator pods' selector labels", flag)
    else:
        report(not any(a.startswith(("--operator-namespace", "--operator-pod-labels", "--metrics-namespace"))
                       for a in args), f"[{set_name}] no NetworkPolicy flags when it is off", args)
    if watch_ns:
        want_args.append(f"--namespace={watch_ns}")
    if set_name == "custom":
        want_args += ["--workers=16", "--log-level=debug", "--log-format=json"]
    missing = [a for a in want_args if a not in args]
    report(not missing, f"[{set_name}] operator flags", f"missing {missing} in {args}")
    if not watch_ns:
        report(not any(a.startswith("--namespace") for a in args),
               f"[{set_name}] watches every namespace (no --namespace)", args)
    if not leader:
        report(not any(a.startswith("--leader-election-id") for a in args),
               f"[{set_name}] no Lease name without leader election", args)
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env", [])}
    report(env.get("POD_NAMESPACE") == "metadata.namespace" and env.get("POD_NAME") == "metadata.name",
           f"[{set_name}] POD_NAMESPACE and POD_NAME from the downward API", env)
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    report(ports == {"http": 8080}, f"[{set_name}] port http 8080", ports)
    ready = c.get("readinessProbe", {}).get("httpGet", {})
    report(ready.get("path") == "/readyz" and ready.get("port") == "http",
           f"[{set_name}] readiness probe GET /readyz", ready)
    live = c.get("livenessProbe", {}).get("httpGet", {})
    if set_name == "minimal":
        report("livenessProbe" not in c, f"[{set_name}] livenessProbe: null removes the probe")
    else:
        report(live.get("path") == "/healthz" and live.get("port") == "http",
               f"[{set_name}] liveness probe GET /healthz", live)
    res = c.get("resources", {})
    report(bool(res.get("requests", {}).get("cpu")) and bool(res.get("requests", {}).get("memory"))
           and bool(res.get("limits", {}).get("memory")),
           f"[{set_name}] requests and a memory limit", res)
    if set_name == "custom":
        report(res == {"requests": {"cpu": "250m", "memory": "256Mi"},
                       "limits": {"cpu": "2", "memory": "1Gi"}},
               f"[{set_name}] resources as given", res)
        report(dep["spec"]["replicas"] == 2, f"[{set_name}] 2 replicas")
        report(pod.get("imagePullSecrets") == [{"name": "registry-credentials"}],
               f"[{set_name}] imagePullSecrets", pod.get("imagePullSecrets"))
        report(c.get("imagePullPolicy") == "Always", f"[{set_name}] pullPolicy Always")
        report(pod.get("nodeSelector") == {"kubernetes.io/os": "linux"}
               and pod.get("priorityClassName") == "ml-high", f"[{set_name}] scheduling values")
        report(dep["metadata"]["name"] == "ml-cohort-operator", f"[{set_name}] fullnameOverride",
               dep["metadata"]["name"])

    # Restricted security context.
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    run_as_non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    report(run_as_non_root is True and uid not in (None, 0), f"[{set_name}] runs as non-root (uid {uid})")
    report(csc.get("readOnlyRootFilesystem") is True, f"[{set_name}] read-only root file system")
    report(csc.get("allowPrivilegeEscalation") is False, f"[{set_name}] no privilege escalation")
    report(csc.get("capabilities", {}).get("drop") == ["ALL"] and not csc.get("capabilities", {}).get("add"),
           f"[{set_name}] every capability dropped")
    report(seccomp == "RuntimeDefault", f"[{set_name}] seccomp RuntimeDefault", seccomp)
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    report(not mounts and not vols,
           f"[{set_name}] no volumes: the operator writes nothing (read-only root)", (mounts, vols))
    report(pod.get("serviceAccountName") == sa_name, f"[{set_name}] service account {sa_name}",
           pod.get("serviceAccountName"))

    # -- The metrics Service selects the operator pods.
    svcs = by_kind.get("Service", [])
    report(len(svcs) == 1, f"[{set_name}] one metrics Service", len(svcs))
    if svcs:
        sel = svcs[0]["spec"]["selector"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        report(all(labels.get(k) == v for k, v in sel.items()),
               f"[{set_name}] the metrics Service selects the operator's pods", sel)
        sp = svcs[0]["spec"]["ports"]
        report([(p["name"], p["port"], p["targetPort"]) for p in sp] == [("http-metrics", 8080, "http")],
               f"[{set_name}] the metrics Service port http-metrics -> http", sp)

    # -- RBAC: exactly the operator's rules, bound to its ServiceAccount.
    sas = [o["metadata"]["name"] for o in by_kind.get("ServiceAccount", [])]
    if set_name == "minimal":
        report(not sas and not by_kind.get("Role") and not by_kind.get("ClusterRole")
               and not by_kind.get("RoleBinding") and not by_kind.get("ClusterRoleBinding"),
               f"[{set_name}] no ServiceAccount and no RBAC objects", sorted(by_kind))
    else:
        report(sas == [sa_name], f"[{set_name}] ServiceAccount {sa_name}", sas)
        kind = "Role" if watch_ns else "ClusterRole"
        other = "ClusterRole" if watch_ns else None
        main = [o for o in by_kind.get(kind, [])
                if not o["metadata"]["name"].endswith("-leader-election") and not is_kueue_role(o)
                and not is_storage_role(o)]
        report(len(main) == 1, f"[{set_name}] one {kind} for the operator's work", len(main))
        if other:
            report(not [o for o in by_kind.get(other, [])
                        if not is_kueue_role(o) and not is_storage_role(o)],
                   f"[{set_name}] no {other} but Kueue's and StorageClasses' when one namespace is watched")
        storage = [o for o in by_kind.get("ClusterRole", []) if is_storage_role(o)]
        report(len(storage) == 1 and rules_of(storage[0]) == STORAGE_RULES,
               f"[{set_name}] a ClusterRole to list StorageClasses (state volume Auto), nothing more",
               [rules_of(o) for o in storage])
        if storage:
            bound = [b["subjects"] for b in by_kind.get("ClusterRoleBinding", [])
                     if b["roleRef"]["name"] == storage[0]["metadata"]["name"]]
            report(bound == [[{"kind": "ServiceAccount", "name": sa_name, "namespace": release_ns}]],
                   f"[{set_name}] the StorageClasses ClusterRole is bound to the operator", bound)
        kueue_roles = {o["metadata"]["name"].rsplit("-", 1)[-1]: o
                       for o in by_kind.get("ClusterRole", []) if is_kueue_role(o)}
        if set(kueue_roles) == {"kueue", "reader"}:
            flavors, reader = kueue_roles["kueue"], kueue_roles["reader"]
            report(rules_of(flavors) == KUEUE_FLAVOR_RULES,
                   f"[{set_name}] Kueue: ResourceFlavors and priority classes read cluster-wide, nothing more",
                   rules_of(flavors))
            report(rules_of(reader) == KUEUE_READER_RULES,
                   f"[{set_name}] Kueue's controller may read CoordinatedJobs, nothing more",
                   rules_of(reader))
            subjects = {b["roleRef"]["name"]: b["subjects"]
                        for b in by_kind.get("ClusterRoleBinding", [])}
            report(subjects.get(reader["metadata"]["name"]) == [
                {"kind": "ServiceAccount", "name": "kueue-controller-manager",
                 "namespace": "kueue-system"}] and
                subjects.get(flavors["metadata"]["name"]) == [
                {"kind": "ServiceAccount", "name": sa_name, "namespace": release_ns}],
                f"[{set_name}] Kueue's ClusterRoles are bound to the operator and to Kueue's controller")
        else:
            report(False, f"[{set_name}] Kueue's two ClusterRoles (kueue.mode auto)", sorted(kueue_roles))
        if main:
            role = main[0]
            if watch_ns:
                report(role["metadata"].get("namespace") == watch_ns,
                       f"[{set_name}] the Role is in the watched namespace {watch_ns}",
                       role["metadata"].get("namespace"))
            got = rules_of(role)
            # With cert-manager's certificates the operator creates Certificates, nothing more.
            want = sorted(EXPECTED_RULES + [("cert-manager.io", "certificates", ("create",))]) \
                if set_name == "custom" else EXPECTED_RULES
            report(got == want, f"[{set_name}] {kind} grants exactly the operator's API use",
                   f"got {got}")
            wild = [r for r in role.get("rules", []) if "*" in r.get("verbs", []) + r.get("resources", []) + r.get("apiGroups", [])]
            report(not wild, f"[{set_name}] no wildcards in RBAC", wild)
            binds = [b for b in by_kind.get(kind + "Binding", [])
                     if b["roleRef"]["name"] == role["metadata"]["name"]]
            report(len(binds) == 1 and binds[0]["subjects"] == [
                {"kind": "ServiceAccount", "name": sa_name, "namespace": release_ns}],
                f"[{set_name}] {kind}Binding to the operator's ServiceAccount",
                [b.get("subjects") for b in binds])
        le = [o for o in by_kind.get("Role", []) if o["metadata"]["name"].endswith("-leader-election")]
        report(len(le) == 1 and le[0]["metadata"]["namespace"] == release_ns,
               f"[{set_name}] a Role for the leader Lease in the release namespace")
        if le:
            rules = sorted((tuple(r.get("resources", [])), tuple(sorted(r["verbs"])),
                            tuple(r.get("resourceNames", []))) for r in le[0]["rules"])
            report(rules == [(("leases",), ("create",), ()), (("leases",), ("get", "update"), (lease,))],
                   f"[{set_name}] leases: create, and get/update of {lease} only", rules)

    # -- The ValidatingAdmissionPolicy: off unless asked for.
    vaps = by_kind.get("ValidatingAdmissionPolicy", [])
    vapbs = by_kind.get("ValidatingAdmissionPolicyBinding", [])
    if set_name != "isolation":
        report(not vaps and not vapbs, f"[{set_name}] no admission policy (off by default)")
    else:
        report(len(vaps) == 1 and len(vapbs) == 1, f"[{set_name}] one ValidatingAdmissionPolicy and its binding",
               (len(vaps), len(vapbs)))
        if vaps and vapbs:
            vap, vapb = vaps[0], vapbs[0]
            name = f"{release_ns}-{expect['prefix']}-operator"
            report(vap["metadata"]["name"] == name and vapb["spec"]["policyName"] == name,
                   f"[{set_name}] {name}: named after the release namespace, bound by name",
                   (vap["metadata"]["name"], vapb["spec"].get("policyName")))
            rules = vap["spec"]["matchConstraints"]["resourceRules"]
            report([(r["apiGroups"], r["resources"], sorted(r["operations"])) for r in rules]
                   == [(["cohort.dev"], ["coordinatedjobs"], ["CREATE", "UPDATE"])]
                   and vap["spec"]["failurePolicy"] == "Fail",
                   f"[{set_name}] it checks CoordinatedJobs on create and update (not their status), failing closed",
                   rules)
            messages = " ".join(v["message"] for v in vap["spec"]["validations"])
            # The values in isolation.yaml: host namespaces allowed, the rest not.
            wanted = ["admissionPolicy.allowPrivileged", "admissionPolicy.allowHostPath",
                      "admissionPolicy.allowHostPorts", "admissionPolicy.allowRunAsRoot",
                      "admissionPolicy.allowedCapabilities", "admissionPolicy.allowedServiceAccounts"]
            report(all(w in messages for w in wanted) and "allowHostNamespaces" not in messages
                   and len(vap["spec"]["validations"]) == len(wanted),
                   f"[{set_name}] one validation per privilege not allowed, none for one allowed (host namespaces)",
                   messages)
            variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
            report(variables.get("allowedCapabilities") == '["NET_BIND_SERVICE"]'
                   and variables.get("allowedServiceAccounts") == '["trainer","tuner"]',
                   f"[{set_name}] the allowed lists are CEL list literals of the values", variables)
            report(vapb["spec"]["validationActions"] == ["Deny"]
                   and vapb["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {"cohort.dev/tenant": "true"}},
                   f"[{set_name}] the binding denies, in the namespaces of admissionPolicy.namespaceSelector",
                   vapb["spec"])

    # -- Monitoring and dashboards.
    cms = [o for o in by_kind.get("ConfigMap", []) if "-dashboard-" in o["metadata"]["name"]]
    if set_name == "monitoring":
        files = sorted(f for f in os.listdir(os.path.join(CHART, "dashboards")) if f.endswith(".json"))
        report(len(cms) == len(files), f"[{set_name}] one dashboard ConfigMap per file ({len(files)})", len(cms))
        for cm in cms:
            labels = cm["metadata"].get("labels", {})
            ann = cm["metadata"].get("annotations", {})
            (key, text), = cm["data"].items()
            name = key.replace("cohort-", "", 1)
            same = json.loads(text) == json.load(open(os.path.join(CHART, "dashboards", name)))
            report(labels.get("grafana_dashboard") == "1" and ann.get("grafana_folder") == "cohort" and same,
                   f"[{set_name}] {cm['metadata']['name']}: grafana_dashboard=1, folder, the file's JSON")
        count = lambda pat: len(re.findall(pat, monitors, re.M))
        report(count(r"^kind: ServiceMonitor$") == 2 and count(r"^kind: PodMonitor$") == 1,
               f"[{set_name}] ServiceMonitors for the operator and coordinators, a PodMonitor for sidecars")
        report(count(r"^    release: kps$") == 3, f"[{set_name}] additionalLabels on every monitor")
        report(count(r"^      interval: 15s$") == 3, f"[{set_name}] the scrape interval on every endpoint")
        report(re.search(r"- port: http-metrics", monitors) and re.search(r"- port: http$", monitors, re.M)
               and re.search(r"- port: metrics$", monitors, re.M),
               f"[{set_name}] monitors scrape ports http-metrics (operator), http (coordinators), metrics (sidecars)")
        report(count(r"^      app\.kubernetes\.io/managed-by: cohort-operator$") == 2
               and re.search(r"^      cohort\.dev/role: worker$", monitors, re.M),
               f"[{set_name}] coordinator and sidecar monitors select the operator's children")
        relabel = json.load(open(os.path.join(CHART, "monitoring", "relabelings.json")))
        targets = {r.get("targetLabel") for k in ("coordinator", "sidecar", "operator")
                   for kind in ("relabelings", "metricRelabelings") for r in relabel[k][kind]} - {None}
        report(all(re.search(rf"targetLabel: {t}$", monitors, re.M) for t in targets),
               f"[{set_name}] the relabelling of monitoring/relabelings.json ({', '.join(sorted(targets))})")
    else:
        report(not monitors.strip() and not cms, f"[{set_name}] no monitors and no dashboards (off by default)")


def main():
    if sys.argv[1] == "split":
        split(*sys.argv[2:5])
        return 0
    check(*sys.argv[2:])
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
