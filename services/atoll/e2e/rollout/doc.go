// Package rollout holds the end-to-end test of an App's zone-by-zone
// rollout (services/aggregator/rollout) in a region of its own: three
// member clusters (zones a, b, c) where zone b's KWOK runs, besides its
// default stages, the chaos stage pod-container-running-failed, which
// fails every Running pod labelled pod-container-running-failed.stage.kwok.x-k8s.io=true.
// (Zone b gets its stages from kwokctl configuration, testdata/zone-b-stages.yaml:
// kwok v0.8.0 loads no default stage once any Stage is configured, and none
// at all with the Stage CRD enabled, so the defaults are listed there too.)
// The App's new template carries that label, so its new pods run in
// zones a and c and fail in zone b only.
//
// Zone a's KWOK adds two stages (testdata/zone-a-stages.yaml) for
// readiness_test.go: a pod labelled readiness.stage.kwok.x-k8s.io=hold
// starts Running but not ready, as one whose readiness probe has not
// passed yet, and turns ready once the label says release.
//
// The test needs member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skips under -short.
package rollout
