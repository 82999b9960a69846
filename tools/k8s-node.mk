# Pinned versions of the one-node cluster's node (make k8s-up, issue 37):
# the kubelet and kube-proxy come from KUBE_VERSION (versions.mk), like the
# control plane; these pin the rest. hack/build-k8s-node.sh builds them.
# CONTAINERD_VERSION pins containerd, containerd-shim-runc-v2 and ctr (Kubernetes 1.36 needs 2.x).
CONTAINERD_VERSION := v2.3.7
# CNI_PLUGINS_VERSION pins the bridge, host-local, loopback and portmap CNI plugins.
CNI_PLUGINS_VERSION := v1.10.0
# COREDNS_VERSION pins the cluster DNS (only the plugins the node needs, hack/build-k8s-node.sh).
COREDNS_VERSION := v1.14.7
