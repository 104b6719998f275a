#!/usr/bin/env bash
# The deployment files (deploy/), checked without a cluster, a container
# engine or a registry (docs/deploy.md, "What CI checks"):
#
#   scripts/deploy-check.sh install      Debian tools it needs (when missing) and a
#                                        virtualenv with a pinned kubernetes-validate
#   scripts/deploy-check.sh run [BIN]    BIN defaults to the debug build of tessera
#
# `run`:
#  1. every object in deploy/kubernetes/*.yaml against the Kubernetes schemas
#     (kubernetes-validate --strict, the oldest Kubernetes the manifest is for
#     and the newest the pin knows), then deploy/check.py lint: the Restricted
#     Pod Security Standard fields, resources, the three probes, no service
#     account token, a pinned image, a NetworkPolicy and a PodDisruptionBudget
#     selecting the pods, Secret files readable by the pod's user only, and the
#     Containerfile consistent with the Deployment;
#  2. deploy/tessera.service: systemd-analyze security (exposure at most 2.0)
#     and systemd-analyze verify;
#  3. the build context .containerignore leaves (buildah, FROM scratch: no
#     registry needed): no key, token, database or target/ in it;
#  4. BIN started as the Deployment and the Containerfile say, in a private
#     mount and network namespace (deploy/check.py boot): probes answered,
#     SIGTERM -> exit 0.
# TESSERA_DEPLOY_DIR names another folder laid out like deploy/ (to show a
# check failing on older files). Nothing is written outside a temporary
# directory, removed at the end; the namespace's mounts go with it.
set -euo pipefail
cd "$(dirname "$0")/.."

KV_VERSION="1.37.0"
K8S_VERSIONS=(1.30.0 1.37.0)
# `systemd-analyze security --threshold` is the exposure score times ten:
# exit status 1 when the score is above 2.0.
SYSTEMD_THRESHOLD=20
cache="${TESSERA_CACHE_DIR:-${HOME:-/root}/.cache/tessera}"
venv="$cache/.venv-deploy"
stamp="$venv/.tessera-kubernetes-validate-$KV_VERSION"

install() {
  local missing=()
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
  command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  if ((${#missing[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if [[ -f "$stamp" && -x "$venv/bin/kubernetes-validate" ]]; then
    return 0
  fi
  mkdir -p "$cache"
  exec 9>"$cache/.venv-deploy.lock"
  flock 9
  if [[ -f "$stamp" && -x "$venv/bin/kubernetes-validate" ]]; then
    return 0
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "kubernetes-validate==$KV_VERSION" >&2
  "$venv/bin/python" -c "import yaml, kubernetes_validate" >&2
  touch "$stamp"
  echo "deploy-check: kubernetes-validate $KV_VERSION installed in $venv" >&2
}

run() {
  install
  local bin=${1:-${CARGO_TARGET_DIR:-target}/debug/tessera}
  local deploy=${TESSERA_DEPLOY_DIR:-deploy}
  local repo tmp passed=0 failed=0
  repo=$(pwd)
  bin=$(realpath "$bin")
  [[ -x "$bin" ]] || { echo "deploy-check: $bin is not an executable" >&2; exit 1; }
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT

  echo "== deploy-check: Kubernetes schemas (kubernetes-validate $KV_VERSION --strict)"
  local k ok=1
  for k in "${K8S_VERSIONS[@]}"; do
    "$venv/bin/kubernetes-validate" --strict --kubernetes-version "$k" "$deploy"/kubernetes/*.yaml || ok=0
  done
  count $ok
  echo "== deploy-check: Restricted pod security, probes, resources, selectors, image"
  ok=1
  "$venv/bin/python" deploy/check.py lint "$deploy" || ok=0
  count $ok

  echo "== deploy-check: systemd unit"
  ok=1
  if ! systemd-analyze security --offline=true --threshold="$SYSTEMD_THRESHOLD" \
    "$deploy/tessera.service" >"$tmp/security.txt" 2>&1; then
    grep -v '✓' "$tmp/security.txt" >&2
    echo "deploy-check: FAIL: $deploy/tessera.service: exposure above $((SYSTEMD_THRESHOLD / 10)).$((SYSTEMD_THRESHOLD % 10))" >&2
    ok=0
  else
    grep 'Overall exposure level' "$tmp/security.txt"
  fi
  count $ok
  # verify resolves ExecStart's binary: the same unit, with BIN at that path.
  mkdir "$tmp/unit"
  sed "s#/usr/local/bin/tessera#$bin#g" "$deploy/tessera.service" >"$tmp/unit/tessera.service"
  if ! systemd-analyze verify "$tmp/unit/tessera.service" >"$tmp/verify.txt" 2>&1 || [[ -s "$tmp/verify.txt" ]]; then
    cat "$tmp/verify.txt" >&2
    echo "deploy-check: FAIL: systemd-analyze verify $deploy/tessera.service" >&2
    count 0
  else
    echo "deploy-check: ok: systemd-analyze verify: no complaint"
    count 1
  fi

  echo "== deploy-check: build context (.containerignore, buildah)"
  ok=1
  context_check "$tmp" || ok=0
  count $ok

  echo "== deploy-check: the broker started as the Deployment and the Containerfile say"
  mkdir "$tmp/boot"
  ok=1
  unshare --mount --net --fork -- bash -c \
    'set -e; ip link set lo up; exec "$1" deploy/check.py boot "$2" "$3" "$4" "$5"' \
    deploy-check "$venv/bin/python" "$deploy" "$repo" "$bin" "$tmp/boot" || ok=0
  count $ok

  # The plain closing line: one per step above.
  echo "deploy-check: $passed passed, $failed failed"
  ((failed == 0))
}

# Counts one step of `run` (its callers' locals, by bash's dynamic scope).
count() {
  if (($1)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

# What `podman build -f deploy/Containerfile .` would send as its context: a
# copy of the repository's tracked files plus the kind of local leftovers the
# .containerignore must keep out, built FROM scratch (no registry) and listed.
context_check() {
  local tmp=$1 ctx="$1/ctx" store="$1/buildah"
  mkdir "$ctx"
  git ls-files -z | xargs -0 cp --parents -t "$ctx" --
  [[ -f .containerignore ]] && cp .containerignore "$ctx/"
  mkdir -p "$ctx/target/release" "$ctx/secrets" "$ctx/broker/target" "$ctx/.git"
  local f
  for f in admin.token tessera-dev.kek tessera.db tessera.db-wal target/release/tessera \
    secrets/kek secrets/admin.token broker/tessera.db broker/target/x .git/config; do
    echo leftover >"$ctx/$f"
  done
  printf 'FROM scratch\nCOPY . /context\n' >"$tmp/context.Containerfile"
  local b=(buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs)
  if ! "${b[@]}" build -q -f "$tmp/context.Containerfile" -t tessera-context-check "$ctx" \
    >"$tmp/buildah.log" 2>&1; then
    cat "$tmp/buildah.log" >&2
    echo "deploy-check: FAIL: buildah could not build the context probe" >&2
    return 1
  fi
  local c m
  c=$("${b[@]}" from -q tessera-context-check)
  m=$("${b[@]}" mount "$c")
  (cd "$m/context" && find . -type f | sed 's#^\./##' | sort) >"$tmp/context.txt"
  "${b[@]}" umount "$c" >/dev/null
  "${b[@]}" rm "$c" >/dev/null
  "${b[@]}" rmi -f tessera-context-check >/dev/null
  local bad
  bad=$(grep -E '(^|/)(admin\.token|kek|[^/]*\.kek|[^/]*\.db(-wal|-shm)?)$|(^|/)target/|^\.git/' "$tmp/context.txt" || true)
  if [[ -n "$bad" ]]; then
    echo "deploy-check: FAIL: the build context would hold:" >&2
    echo "$bad" | sed 's/^/  /' >&2
    return 1
  fi
  local need
  for need in Cargo.toml Cargo.lock broker/Cargo.toml client-lib/Cargo.toml migrations policy; do
    grep -q "^$need" "$tmp/context.txt" || {
      echo "deploy-check: FAIL: the build context lacks $need" >&2
      return 1
    }
  done
  echo "deploy-check: ok: build context: $(wc -l <"$tmp/context.txt") files, no key, token, database or target/"
}

case "${1:-}" in
  install) install ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/deploy-check.sh install|run [BIN]" >&2; exit 2 ;;
esac
