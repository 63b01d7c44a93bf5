#!/usr/bin/env bash
# k8s-fixture.sh: a real Kubernetes control plane on loopback for gpupool's tests and benchmark.
#
# What runs: etcd (Debian's etcd-server), kube-apiserver v1.20.2, and on request
# kube-controller-manager (only the controllers asked for, e.g. the Job controller) and
# kube-scheduler (default-scheduler, optionally calling gpupool's extender). No kubelet: tests
# create Nodes themselves and mark pods Running/Succeeded through the status subresource.
#
# The three Kubernetes binaries are built offline from Debian bookworm's `kubernetes` source
# package (its orig tarball carries the full upstream v1.20.2 tree with vendor/) with Debian's
# golang-1.19-go, once per machine, and cached outside the repository.
#
#   scripts/k8s-fixture.sh install         apt packages + build (cold: about 10-15 min on 2 cores)
#   scripts/k8s-fixture.sh built           exit 0 when the binaries are in the cache
#   scripts/k8s-fixture.sh start           etcd + kube-apiserver (+ kcm when GPUPOOL_K8S_CONTROLLERS)
#   scripts/k8s-fixture.sh start-kcm       kube-controller-manager with $GPUPOOL_K8S_CONTROLLERS
#   scripts/k8s-fixture.sh start-scheduler kube-scheduler; GPUPOOL_K8S_EXTENDER=<url> adds an extender
#   scripts/k8s-fixture.sh stop-apiserver  stop kube-apiserver only (etcd keeps the data)
#   scripts/k8s-fixture.sh stop-one NAME   stop one of etcd|apiserver|kcm|scheduler
#   scripts/k8s-fixture.sh stop            stop everything this instance started
#   scripts/k8s-fixture.sh clean           stop and delete the instance's state
#   scripts/k8s-fixture.sh env             print `export KUBECONFIG=...`
#   scripts/k8s-fixture.sh status
#
# Environment (defaults):
#   GPUPOOL_K8S_CACHE=$HOME/.cache/gpupool-k8s   source tarball, bin/ with the binaries (the build
#                                                tree is deleted after a build unless
#                                                GPUPOOL_K8S_KEEP_TREE is set)
#   GPUPOOL_K8S_HOME=/tmp/gpupool-k8s            one running instance: pki, kubeconfig, logs, pids
#   GPUPOOL_K8S_PORT=26443                       kube-apiserver's secure port; etcd uses PORT+1000
#                                                and PORT+1001, the scheduler's health port PORT+2000
#   GPUPOOL_K8S_ETCD_DIR=/dev/shm/gpupool-k8s-etcd-$PORT   etcd data (tmpfs: no fsync cost)
#   GPUPOOL_K8S_CONTROLLERS=                     e.g. job,garbagecollector for start
#   GPUPOOL_K8S_EXTENDER=                        e.g. http://127.0.0.1:18080/extender
#   GPUPOOL_K8S_SCHEDULER_QPS=50                 kube-scheduler's client QPS (burst twice that);
#                                                50 is kube-scheduler's own default
#   GPUPOOL_K8S_APISERVER_ARGS=                  extra kube-apiserver flags, e.g.
#                                                --watch-cache-sizes=pods#0 (pod watches served by
#                                                etcd: after a compaction an old version is 410)
set -euo pipefail

CACHE=${GPUPOOL_K8S_CACHE:-$HOME/.cache/gpupool-k8s}
HOME_DIR=${GPUPOOL_K8S_HOME:-/tmp/gpupool-k8s}
PORT=${GPUPOOL_K8S_PORT:-26443}
ETCD_CLIENT=$((PORT + 1000))
ETCD_PEER=$((PORT + 1001))
SCHED_HEALTH=$((PORT + 2000))
ETCD_DIR=${GPUPOOL_K8S_ETCD_DIR:-/dev/shm/gpupool-k8s-etcd-$PORT}
CONTROLLERS=${GPUPOOL_K8S_CONTROLLERS:-}
EXTENDER=${GPUPOOL_K8S_EXTENDER:-}
APISERVER_ARGS=${GPUPOOL_K8S_APISERVER_ARGS:-}
SCHED_QPS=${GPUPOOL_K8S_SCHEDULER_QPS:-50}
BIN=$CACHE/bin
COMPONENTS="kube-apiserver kube-scheduler kube-controller-manager"
K8S_VERSION=1.20.2
KUBECONFIG_FILE=$HOME_DIR/kubeconfig

say() { echo "[k8s-fixture] $*" >&2; }
die() { say "$*"; exit 1; }

built() {
  local c
  for c in $COMPONENTS; do [[ -x $BIN/$c ]] || return 1; done
  command -v etcd >/dev/null
}

apt_packages() {
  local need=() p
  for p in golang-1.19-go etcd-server etcd-client rsync make openssl curl ca-certificates; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
  done
  [[ ${#need[@]} -eq 0 ]] && return 0
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
}

# Debian's source package, fetched with a private apt configuration whose deb-src entries mirror
# the machine's own Debian sources; the machine's apt configuration is left as it is.
fetch_source() {
  local src=$CACHE/src apt=$CACHE/apt
  if compgen -G "$src/kubernetes_*really${K8S_VERSION}.orig.tar.gz" >/dev/null; then return 0; fi
  mkdir -p "$src" "$apt"/{etc,lists/partial,cache/archives/partial}
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    sed -n '/^Types:/,$p' /etc/apt/sources.list.d/debian.sources \
      | sed 's/^Types: deb$/Types: deb-src/' >"$apt/etc/deb-src.sources"
  else
    grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' \
      >"$apt/etc/deb-src.list" || true
  fi
  local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/etc"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
  apt-get "${opts[@]}" update -qq
  (cd "$src" && apt-get "${opts[@]}" source --download-only kubernetes >/dev/null)
  compgen -G "$src/kubernetes_*really${K8S_VERSION}.orig.tar.gz" >/dev/null \
    || die "Debian's kubernetes source package is not version ${K8S_VERSION}; see $src"
}

# Go 1.18 changed runtime.mapiterinit to fill an iterator the caller allocates. The vendored
# modern-go/reflect2 links to it with the old signature, which makes kube-apiserver crash on the
# first map it encodes through json-iterator (any custom resource). Adapt reflect2's two sites.
patch_reflect2() {
  python3 - "$1/vendor/github.com/modern-go/reflect2" <<'PY'
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
link = root / "unsafe_link.go"
text = link.read_text()
old_sig = "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter"
if old_sig in text:
    text = text.replace(old_sig, "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)")
    layout = [("key", "unsafe.Pointer"), ("value", "unsafe.Pointer"), ("t", "unsafe.Pointer"),
              ("h", "unsafe.Pointer"), ("buckets", "unsafe.Pointer"), ("bptr", "unsafe.Pointer"),
              ("overflow", "*[]unsafe.Pointer"), ("oldoverflow", "*[]unsafe.Pointer"),
              ("startBucket", "uintptr"), ("offset", "uint8"), ("wrapped", "bool"),
              ("B", "uint8"), ("i", "uint8"), ("bucket", "uintptr"), ("checkBucket", "uintptr")]
    struct = "type hiter struct {\n" + "".join(f"\t{n} {t}\n" for n, t in layout) + "}"
    text = re.sub(r"type hiter struct \{.*?\n\}", lambda _m: struct, text, count=1, flags=re.S)
    link.write_text(text)
umap = root / "unsafe_map.go"
text = umap.read_text()
call = "\t\thiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),"
if call in text:
    text = text.replace(
        "\treturn &UnsafeMapIterator{\n" + call,
        "\tit := new(hiter)\n\tmapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), it)\n"
        "\treturn &UnsafeMapIterator{\n\t\thiter:      it,")
    umap.write_text(text)
PY
}

install() {
  apt_packages
  if built; then say "cached: $BIN ($("$BIN/kube-apiserver" --version))"; return 0; fi
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.build.lock"
  flock 9
  if built; then say "built meanwhile by another process: $BIN"; return 0; fi
  local t0=$SECONDS
  fetch_source
  local tree=$CACHE/kubernetes-$K8S_VERSION
  if [[ ! -f $tree/Makefile ]]; then
    tar xzf "$(ls "$CACHE"/src/kubernetes_*really${K8S_VERSION}.orig.tar.gz | head -1)" -C "$CACHE"
  fi
  patch_reflect2 "$tree"
  # `make WHAT=...` runs the code generators (openapi-gen and friends) whose output the tarball
  # lacks, then builds in GOPATH mode; a plain `go build` would miss the generated files.
  (
    cd "$tree"
    export PATH=/usr/lib/go-1.19/bin:$PATH GO111MODULE=off GOPROXY=off GOFLAGS= CGO_ENABLED=0 \
      GOTOOLCHAIN=local GOCACHE=$CACHE/gocache HOME=$CACHE/home \
      KUBE_BUILD_PLATFORMS=linux/amd64 GOLDFLAGS="-s -w" \
      KUBE_GIT_VERSION=v$K8S_VERSION KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
    mkdir -p "$HOME"
    local what="" c
    for c in $COMPONENTS; do what="$what cmd/$c"; done
    make WHAT="${what# }"
    mkdir -p "$BIN"
    for c in $COMPONENTS; do cp "_output/bin/$c" "$BIN/$c.tmp" && mv "$BIN/$c.tmp" "$BIN/$c"; done
  )
  # The tree with its build output is about 2.3 GiB; the tarball (33 MiB) stays for a rebuild.
  [[ -n ${GPUPOOL_K8S_KEEP_TREE:-} ]] || rm -rf "$tree"
  say "built $COMPONENTS in $((SECONDS - t0)) s into $BIN"
}

pki() {
  local p=$HOME_DIR/pki
  [[ -f $p/tokens.csv ]] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gpupool-test-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$p/apiserver.key" -out "$p/apiserver.csr" 2>/dev/null
  printf '%s\n' \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc" \
    "extendedKeyUsage=serverAuth" >"$p/san.cnf"
  openssl x509 -req -in "$p/apiserver.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -days 3650 -extfile "$p/san.cnf" -out "$p/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  # A bearer token in system:masters for the tests, and one without any group: RBAC tests bind
  # the deploy/ ClusterRole to it and check that gpupool can do its work with no more.
  {
    echo "$(openssl rand -hex 24),admin,admin-uid,system:masters"
    echo "$(openssl rand -hex 24),gpupool-limited,gpupool-limited-uid"
  } >"$p/tokens.csv"
}

kubeconfig() {
  local token ca
  token=$(sed -n 1p "$HOME_DIR/pki/tokens.csv" | cut -d, -f1)
  ca=$(base64 -w0 "$HOME_DIR/pki/ca.crt")
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpupool-test
  cluster: {server: "https://127.0.0.1:$PORT", certificate-authority-data: "$ca"}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: gpupool-test
  context: {cluster: gpupool-test, user: admin, namespace: default}
current-context: gpupool-test
EOF
}

running() { [[ -f $HOME_DIR/$1.pid ]] && kill -0 "$(cat "$HOME_DIR/$1.pid")" 2>/dev/null; }

launch() {
  local name=$1; shift
  setsid "$@" >"$HOME_DIR/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$HOME_DIR/$name.pid"
}

start_etcd() {
  running etcd && return 0
  mkdir -p "$ETCD_DIR"
  launch etcd etcd --name gpupool-test --data-dir "$ETCD_DIR" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "gpupool-test=http://127.0.0.1:$ETCD_PEER"
  local _
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$ETCD_CLIENT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "etcd did not come up; see $HOME_DIR/etcd.log"
}

start_apiserver() {
  if ! running apiserver; then
    local p=$HOME_DIR/pki
    launch apiserver "$BIN/kube-apiserver" \
      --etcd-servers="http://127.0.0.1:$ETCD_CLIENT" \
      --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
      --secure-port="$PORT" --insecure-port=0 \
      --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
      --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" \
      --authorization-mode=RBAC \
      --service-account-issuer=https://kubernetes.default.svc \
      --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
      --service-cluster-ip-range=10.0.0.0/24 \
      --disable-admission-plugins=ServiceAccount \
      --enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
      --allow-privileged=true --profiling=false --endpoint-reconciler-type=none \
      --max-requests-inflight=2000 --max-mutating-requests-inflight=1000 \
      --cert-dir="$HOME_DIR/certs" $APISERVER_ARGS
  fi
  local token _
  token=$(sed -n 1p "$HOME_DIR/pki/tokens.csv" | cut -d, -f1)
  for _ in $(seq 600); do
    if [[ $(curl -sS --cacert "$HOME_DIR/pki/ca.crt" -H "Authorization: Bearer $token" \
            "https://127.0.0.1:$PORT/readyz" 2>/dev/null) == ok ]]; then
      return 0
    fi
    running apiserver || break
    sleep 0.1
  done
  tail -20 "$HOME_DIR/apiserver.log" >&2 || true
  die "kube-apiserver did not become ready; see $HOME_DIR/apiserver.log"
}

start() {
  built || die "not built: run 'scripts/k8s-fixture.sh install' (cache $CACHE)"
  mkdir -p "$HOME_DIR"
  exec 8>"$HOME_DIR/.start.lock"
  flock 8
  pki
  kubeconfig
  local t0=$SECONDS
  start_etcd
  start_apiserver
  say "ready in $((SECONDS - t0)) s on https://127.0.0.1:$PORT; export KUBECONFIG=$KUBECONFIG_FILE"
  [[ -z $CONTROLLERS ]] || start_kcm
}

# Only the controllers asked for: nodelifecycle would mark the kubelet-less nodes NotReady.
start_kcm() {
  [[ -n $CONTROLLERS ]] || die "set GPUPOOL_K8S_CONTROLLERS (e.g. job,garbagecollector)"
  running kcm && return 0
  launch kcm "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG_FILE" \
    --controllers="$CONTROLLERS" --leader-elect=false --port=0 --secure-port=0 \
    --use-service-account-credentials=false
  say "kube-controller-manager: $CONTROLLERS"
}

start_scheduler() {
  running scheduler && return 0
  {
    echo "apiVersion: kubescheduler.config.k8s.io/v1beta1"
    echo "kind: KubeSchedulerConfiguration"
    echo "clientConnection: {kubeconfig: $KUBECONFIG_FILE, qps: $SCHED_QPS, burst: $((SCHED_QPS * 2))}"
    echo "leaderElection: {leaderElect: false}"
    echo "healthzBindAddress: 127.0.0.1:$SCHED_HEALTH"
    echo "metricsBindAddress: 127.0.0.1:$SCHED_HEALTH"
    if [[ -n $EXTENDER ]]; then
      echo "extenders:"
      echo "- urlPrefix: $EXTENDER"
      echo "  filterVerb: filter"
      echo "  prioritizeVerb: prioritize"
      echo "  bindVerb: bind"
      echo "  weight: 10"
      echo "  nodeCacheCapable: false"
      echo "  managedResources:"
      echo "  - {name: nvidia.com/gpu, ignoredByScheduler: true}"
      echo "  - {name: nvidia.com/gpumem, ignoredByScheduler: true}"
      echo "  - {name: nvidia.com/gpucores, ignoredByScheduler: true}"
      echo "  - {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}"
    fi
  } >"$HOME_DIR/scheduler.yaml"
  launch scheduler "$BIN/kube-scheduler" --config="$HOME_DIR/scheduler.yaml" --port=0 \
    --secure-port=0
  say "kube-scheduler: config $HOME_DIR/scheduler.yaml"
}

stop_one() {
  local f=$HOME_DIR/$1.pid pid _
  if running "$1"; then
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() { stop_one scheduler; stop_one kcm; stop_one apiserver; stop_one etcd; }

clean() { stop; rm -rf "$HOME_DIR" "$ETCD_DIR"; }

status() {
  local c
  for c in etcd apiserver kcm scheduler; do
    if running "$c"; then echo "$c: running (pid $(cat "$HOME_DIR/$c.pid"))"; else echo "$c: stopped"; fi
  done
  if built; then echo "binaries: $BIN"; else echo "binaries: not built ($CACHE)"; fi
}

case "${1:-}" in
  install) install ;;
  built) built ;;
  start) start ;;
  start-kcm) start_kcm ;;
  start-scheduler) start_scheduler ;;
  stop-apiserver) stop_one apiserver ;;
  stop-one) stop_one "${2:?name}" ;;
  stop) stop ;;
  clean) clean ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_FILE" ;;
  status) status ;;
  *) echo "usage: $0 {install|built|start|start-kcm|start-scheduler|stop-apiserver|stop-one NAME|stop|clean|env|status}" >&2
     exit 2 ;;
esac
