// Package deploytest checks the Kubernetes manifests in deploy/k8s: that
// they build (kustomize, the Secrets generated from a real `atoll-admin bootstrap
// auth`), that every service that has a main is packaged in full (a
// Deployment with probes, resources and safe replicas, a PodDisruptionBudget,
// a ServiceAccount, a NetworkPolicy, its own NATS Secret, an image), that
// they set only environment variables the services read, and that a real
// kube-apiserver (bin/, through libs/testenv) accepts every object with a
// server-side dry-run.
//
// A new service fails TestManifestsPackageEveryService until its manifest,
// its Secret and its image are in deploy/k8s/kustomization.yaml.
package deploytest
