"""How the operator was installed, and the one place that builds the commands which change it.

The chart was renamed between releases (rblnctl.constants, OPERATOR_HELM_CHART*): up to v0.3.0 it is
`rbln-npu-operator` from the Helm repository https://rbln-sw.github.io/rbln-npu-operator (formerly
rebellions-sw.github.io), later
`rbln-npu-operator-chart` pushed to oci://docker.io/rebellions. Which one a cluster runs, and at which
chart version, is read from the helm.sh/chart label the chart puts on the operator Deployment and on
the RBLNClusterPolicy it renders (RBLN-SW/rbln-npu-operator deployments/rbln-npu-operator/templates/
_helpers.tpl `rbln-npu-operator.labels`, used by templates/operator.yaml and templates/rblnclusterpolicy.yaml).

Every `helm upgrade` carries `--version <the installed chart version>` and `--reuse-values`, so a
remedy never upgrades the operator as a side effect. A policy field is changed first of all with
`kubectl patch rblnclusterpolicy ... --type merge` (runnable as given); when Helm manages the policy
the remedy also names the `helm upgrade --reuse-values --set` that makes the change stick, because
Helm's three-way merge puts its rendered values back on the next upgrade.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.remedy import Command, Remedy
from rblnctl.versions import chart_label


@dataclass(frozen=True, kw_only=True)
class HelmRelease:
    """The Helm release that installed the operator, as its objects' labels and annotations say."""

    release: str
    namespace: str | None  # None: a cluster-scoped object without the release-namespace annotation
    chart: str | None = None  # rbln-npu-operator-chart | rbln-npu-operator; None: no helm.sh/chart label
    version: str | None = None  # the chart version as installed (`0.6.0`, `v0.2.1`)

    @property
    def chart_ref(self) -> str | None:
        """The chart as `helm upgrade` takes it (OCI reference, or name plus --repo); None when unknown."""
        if self.chart == C.OPERATOR_HELM_CHART_OCI:
            return f"{C.OPERATOR_HELM_OCI_REGISTRY}/{C.OPERATOR_HELM_CHART_OCI}"
        if self.chart == C.OPERATOR_HELM_CHART_LEGACY:
            return f"{C.OPERATOR_HELM_CHART_LEGACY} --repo {C.OPERATOR_HELM_REPO_URL}"
        return None

    @property
    def known(self) -> bool:
        """Whether chart and version are known, so an upgrade command can pin both."""
        return self.chart_ref is not None and bool(self.version) and bool(self.namespace)


def helm_release_of(objs: Iterable[Mapping | None], *, namespace: str | None = None) -> HelmRelease | None:
    """The Helm release of the first object that names one: the meta.helm.sh annotations, else the
    app.kubernetes.io/instance label (with the object's namespace, else `namespace`), plus its helm.sh/chart
    label. None when no object says Helm installed it (no release name, or neither a chart label, a
    managed-by=Helm label nor the release annotation)."""
    for obj in objs:
        meta = (obj or {}).get("metadata") or {}
        labels = meta.get("labels") or {}
        notes = meta.get("annotations") or {}
        release = notes.get(C.HELM_RELEASE_NAME_ANNOTATION) or labels.get(C.HELM_INSTANCE_LABEL)
        ns = notes.get(C.HELM_RELEASE_NAMESPACE_ANNOTATION) or meta.get("namespace") or namespace
        chart = chart_label(labels.get(C.HELM_CHART_LABEL), C.OPERATOR_HELM_CHARTS)
        if release and (chart or labels.get(C.MANAGED_BY_LABEL) == "Helm"
                               or notes.get(C.HELM_RELEASE_NAME_ANNOTATION)):
            return HelmRelease(release=str(release), namespace=str(ns) if ns else None,
                               chart=chart[0] if chart else None, version=chart[1] if chart else None)
    return None


def install_command() -> str:
    """`helm upgrade --install` of the current chart (the OCI one) into the documented namespace: the one install
    command every remedy names (install_remedy). RBLN-SW/rbln-npu-operator Makefile: releases push CHART_NAME
    rbln-npu-operator-chart to HELM_REGISTRY oci://docker.io/rebellions ("Default mirrors release.yaml") at
    CHART_VERSION = the release without its `v` (0.6.0), so a pinned install takes `--version 0.6.0`; README.md's
    Quick Start installs into rbln-system, the namespace used here. No version is pinned: a fresh install takes the
    newest release, which every floor rblnctl checks accepts."""
    return INSTALL.line


INSTALL = Command.external("helm", "upgrade", "--install", C.OPERATOR_HELM_CHART_LEGACY,
                           f"{C.OPERATOR_HELM_OCI_REGISTRY}/{C.OPERATOR_HELM_CHART_OCI}", "-n", C.OPERATOR_NAMESPACE,
                           "--create-namespace")


def install_remedy(text: str = "install or upgrade it") -> Remedy:
    """`text`, then the one install command (install_command)."""
    return Remedy(text, INSTALL)


def helm_upgrade(release: HelmRelease | None, sets: Sequence[str]) -> str | None:
    """`helm upgrade` of the release at its installed chart version, keeping its values and setting `sets`
    (`key=value`); None when the chart or its version is unknown (no command could pin them)."""
    if release is None or not release.known:
        return None
    flags = "".join(f" --set {s}" for s in sets)
    return (f"helm upgrade {release.release} {release.chart_ref} --version {release.version} "
            f"-n {release.namespace} --reuse-values{flags}")


def helm_hint(release: HelmRelease | None, sets: Sequence[str]) -> str:
    """helm_upgrade(), or the same command with placeholders when the chart or version is unknown (prose only)."""
    cmd = helm_upgrade(release, sets)
    if cmd:
        return cmd
    flags = "".join(f" --set {s}" for s in sets)
    name = release.release if release else "RELEASE"
    ns = release.namespace if release and release.namespace else "NAMESPACE"
    return f"helm upgrade {name} CHART --version INSTALLED-VERSION -n {ns} --reuse-values{flags}"


def policy_patch(policy: str, values: Mapping[str, bool]) -> str:
    """`kubectl patch rblnclusterpolicy` that sets `<key>.enabled` for each key (runnable as given)."""
    body = {"spec": {k: {"enabled": v} for k, v in values.items()}}
    text = json.dumps(body, separators=(',', ':'))
    return f"kubectl patch rblnclusterpolicy {policy} --type merge -p {shlex.quote(text)}"


def change_policy(policy: str | None, values: Mapping[str, bool], release: HelmRelease | None) -> Remedy:
    """How to set `<key>.enabled` on the policy: kubectl patch (the command), plus Helm as the durable way.

    Without a policy to patch (none exists) the command is the Helm upgrade, when it can be pinned.
    """
    sets = [f"{k}.enabled={'true' if v else 'false'}" for k, v in values.items()]
    helm = helm_upgrade(release, sets)
    if policy is None:
        hint = helm_hint(release, sets)
        return Remedy(text=f"`{hint}` (the chart renders the RBLNClusterPolicy)", command=_external(helm))
    patch = policy_patch(policy, values)
    if release is None:
        return Remedy(text=f"`{patch}` (if Helm manages the policy, set the same values in the release too, or its "
                           "next upgrade puts the old ones back)", command=_external(patch))
    return Remedy(text=f"`{patch}`; Helm release {release.release} renders this policy and its next upgrade would "
                       f"put the old values back, so make it durable with `{helm_hint(release, sets)}`",
                  command=_external(patch))


def _external(line: str | None) -> Command | None:
    """A command line built here (kubectl, helm: runnable as given) as a Command."""
    if not line:
        return None
    words = shlex.split(line)
    return Command.external(words[0], *words[1:])
