#!/bin/sh
# Re-extracts the kept CRD schemas from local clones of the upstream repositories at the commits
# README.md names (maintainer tool; ctest never runs it). Usage, from the repository root:
#   KSERVE=~/src/kserve KEDA=~/src/keda ISTIO_API=~/src/istio-api GATEWAY_API=~/src/gateway-api \
#     ENVOY_GATEWAY=~/src/envoy-gateway tests/deploy/schemas/regenerate.sh
# A clone may be bare; the files are read with `git show COMMIT:PATH`, not from a work tree.
set -eu
S=tests/deploy/schemas
X="/usr/bin/python3 $S/extract_crd_schema.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# crd CLONE REPO COMMIT PATH VERSION OUT MANIFEST... (KIND=... picks one CRD of a file of several)
crd() {
  clone=$1 repo=$2 commit=$3 path=$4 version=$5 out=$6
  shift 6
  git -C "$clone" show "$commit:$path" > "$tmp/crd.yaml"
  $X crd --crd "$tmp/crd.yaml" --version "$version" --repo "$repo" --path "$path" \
    --commit "$commit" ${KIND:+--kind "$KIND"} --manifests "$@" --out "$S/$out"
}

KSERVE_COMMIT=aaac4e294dae2c7b1aa1886447793f3aa1c30912
KEDA_COMMIT=8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a
crd "$KSERVE" kserve/kserve $KSERVE_COMMIT \
  config/crd/full/serving.kserve.io_clusterservingruntimes.yaml v1alpha1 \
  kserve-clusterservingruntime.json deploy/kserve/*.yaml
crd "$KSERVE" kserve/kserve $KSERVE_COMMIT \
  config/crd/full/serving.kserve.io_inferenceservices.yaml v1beta1 \
  kserve-inferenceservice.json deploy/kserve/*.yaml
crd "$KEDA" kedacore/keda $KEDA_COMMIT config/crd/bases/keda.sh_scaledobjects.yaml v1alpha1 \
  keda-scaledobject.json deploy/kserve/*.yaml
git -C "$KEDA" show "$KEDA_COMMIT:pkg/scalers/prometheus_scaler.go" > "$tmp/scaler.go"
$X keda-trigger --scaler "$tmp/scaler.go" --repo kedacore/keda \
  --path pkg/scalers/prometheus_scaler.go --commit $KEDA_COMMIT --out $S/keda-prometheus-trigger.json

P=deploy/proxy
ISTIO_API_COMMIT=b8f8791d9653b2edc77a071d48887e582cfe84bf
GATEWAY_API_COMMIT=4564255ac2c35d582249b3cdf261bdf51c8bca32
ENVOY_GATEWAY_COMMIT=d32f28294245e454d20f81d323d626a90e660c1e
KIND=DestinationRule crd "$ISTIO_API" istio/api $ISTIO_API_COMMIT \
  kubernetes/customresourcedefinitions.gen.yaml v1 istio-destinationrule.json $P/istio/*.yaml
crd "$GATEWAY_API" kubernetes-sigs/gateway-api $GATEWAY_API_COMMIT \
  config/crd/standard/gateway.networking.k8s.io_gateways.yaml v1 gateway-api-gateway.json \
  $P/gateway-api/*.yaml
crd "$GATEWAY_API" kubernetes-sigs/gateway-api $GATEWAY_API_COMMIT \
  config/crd/standard/gateway.networking.k8s.io_grpcroutes.yaml v1 gateway-api-grpcroute.json \
  $P/gateway-api/*.yaml
crd "$ENVOY_GATEWAY" envoyproxy/gateway $ENVOY_GATEWAY_COMMIT \
  charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml \
  v1alpha1 envoy-gateway-backendtrafficpolicy.json $P/gateway-api/*.yaml
