#!/usr/bin/env bash
# Smoke-test a single-file build (packaging/zipapp.sh DIR) as a user runs it: not in the project's venv.
set -euo pipefail
DIR="$(cd "${1:-dist}" && pwd)"
PYZ="$DIR/rblnctl.pyz"
export SHIV_ROOT="$DIR/.shiv"  # unpack here, not in ~/.shiv
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
fail() { echo "smoke: $*" >&2; exit 1; }

version="$("$PYZ" --version)" || fail "--version failed"
echo "smoke: $version"
"$PYZ" --help >/dev/null || fail "--help failed"
"$PYZ" completion bash | grep -q _RBLNCTL_COMPLETE || fail "completion bash"

# The first README command on a host: exit 0 (ready) or 1 (not ready, e.g. no NPU), never a crash.
set +e
"$PYZ" preflight --local -o json > preflight.json 2> preflight.err
rc=$?
set -e
[ "$rc" -le 1 ] || fail "preflight --local exited $rc"
grep -q '"kind": "PreflightReport"' preflight.json || fail "preflight --local printed no report"

# A credential plugin makes rblnctl load the kubernetes package and its compiled dependencies from the pyz;
# the cluster is unreachable on purpose: exit 3 is the answer.
cat > kubeconfig <<'KC'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, interactiveMode: Never,
  args: ["-c", "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'"]}}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: vms}}]
current-context: c
KC
set +e
"$PYZ" --kubeconfig kubeconfig --request-timeout 5s vm list > out.txt 2> err.txt
rc=$?
set -e
[ "$rc" -eq 3 ] || { cat err.txt >&2; fail "an exec-plugin kubeconfig against a closed port exited $rc, not 3"; }

# As a kubectl plugin, found on PATH under its plugin name.
if command -v kubectl >/dev/null; then
  PATH="$DIR:$PATH" kubectl rbln --version | grep -qx "$version" || fail "kubectl rbln --version"
  echo "smoke: kubectl rbln works"
fi
echo "smoke: ok"
