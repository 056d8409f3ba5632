"""`rblnctl status`: one-screen overview of the operator policy, KubeVirt and NPU nodes."""

from __future__ import annotations

from typing import Any

import typer

from rblnctl.cli.options import OutputOpt, SelectorOpt, examples

EXAMPLES = examples(
    "rblnctl status",
    "rblnctl status -o wide",
    "rblnctl status -o jsonpath='{.nodes[?(@.mode==\"vm-passthrough\")].name}'",
)


def status(ctx: typer.Context, selector: SelectorOpt = None, output: OutputOpt = "table") -> None:
    """Show the operator policy, KubeVirt gates and every NPU node's mode at a glance."""
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.status import cluster_status

    with waiting("reading the cluster..."):
        st = cluster_status(ctx.obj.kube(), selector=selector)
    emit(view(st), output)


def view(st: Any) -> Any:
    """The overview in every format (kind ClusterStatus)."""
    from rblnctl.cli.output import View
    from rblnctl.cli.render import node_document, npu_nodes_table, policy_document

    def body() -> dict:
        return {
            "kubernetesVersion": st.server_version,
            "operatorNamespace": st.operator_namespace,
            "policy": policy_document(st.policy),
            "kubevirt": [{"name": k.name, "namespace": k.namespace, "phase": k.phase, "version": k.version,
                          "featureGates": list(k.feature_gates), "disabledFeatureGates": list(k.disabled_feature_gates)}
                         for k in st.kubevirt],
            "modes": dict(st.modes),
            "nodes": [node_document(n) for n in st.nodes],
            "notes": list(st.notes),
        }

    lines = [f"Kubernetes:  {st.server_version}"]
    p = st.policy
    lines.append(f"Policy:      {p.name} {p.switches()} (components in {st.operator_namespace})" if p
                 else "Policy:      <none>")
    for kv in st.kubevirt:
        gates = ",".join(kv.feature_gates) or "<none>"
        line = f"KubeVirt:    {kv.namespace}/{kv.name} {kv.phase or '<unknown>'} {kv.version or ''} gates={gates}"
        if kv.disabled_feature_gates:
            line += f" disabled={','.join(kv.disabled_feature_gates)}"
        lines.append(" ".join(line.split(" ")))
    modes = ", ".join(f"{m}={n}" for m, n in st.modes.items()) or "none"
    lines.append(f"NPU nodes:   {len(st.nodes)} ({modes})")
    return View(kind="ClusterStatus", body=body, preamble=lines, tables=[npu_nodes_table(st.nodes)] if st.nodes else [],
                notes=[f"note: {n}" for n in st.notes], names=[f"node/{n.name}" for n in st.nodes])


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("status", short_help="Overview: policy, KubeVirt, NPU nodes.", epilog=EXAMPLES)(status)
