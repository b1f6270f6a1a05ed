#!/usr/bin/env bash
# Validates every Kubernetes manifest in this directory offline, against the
# schemas of a pinned Kubernetes version, with kubernetes-validate (PyPI;
# installed on first use into a virtualenv under the cargo target dir).
# Strict: unknown fields are errors, and so is a kind without a schema.
# kustomization.yaml is not a Kubernetes object; runner/tests/deploy checks
# that what it lists exists.
#
#   deploy/kubernetes/validate.sh            # exit 0: all valid
#   K8S_VERSION=1.30.0 deploy/kubernetes/validate.sh
#
# Exit 77 (the usual "skipped" code) when python3 with venv/pip is missing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
k8s_version="${K8S_VERSION:-1.31.0}"
kv_version="${KUBERNETES_VALIDATE_VERSION:-1.31.0}"
tools="${CARGO_TARGET_DIR:-$repo/target}/deploy-tools"
venv="$tools/kubernetes-validate-$kv_version"
kv="$venv/bin/kubernetes-validate"

if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not found; cannot install kubernetes-validate" >&2
  exit 77
fi

mkdir -p "$tools"
# Parallel test runs share the venv: one installs, the others wait.
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ ! -x "$kv" ]; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "SKIP: python3 -m venv failed (install python3-venv); cannot install kubernetes-validate" >&2
    exit 77
  fi
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "kubernetes-validate==$kv_version"; then
    rm -rf "$venv"
    echo "ERROR: pip could not install kubernetes-validate==$kv_version" >&2
    exit 1
  fi
fi
flock -u 9 2>/dev/null || true

status=0
for file in "$here"/*.yaml; do
  name="$(basename "$file")"
  [ "$name" = kustomization.yaml ] && continue
  if ! out="$("$kv" --kubernetes-version "$k8s_version" --strict "$file" 2>&1)"; then
    echo "$out"
    status=1
    continue
  fi
  echo "$out"
  # kubernetes-validate only warns about a kind it has no schema for.
  if grep -q "^WARN" <<<"$out"; then
    echo "ERROR $name: warnings are failures here" >&2
    status=1
  fi
done
exit "$status"
