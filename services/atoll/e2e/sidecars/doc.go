// Package sidecars holds the end-to-end test of the platform's managed
// sidecars: versions set as the gateway sets them, admission's sidecar
// rollout moving the running Apps to a new version, and the propagator
// patching an image-only change into the live pods. Its region's member
// clusters (zones a, b, c) run, besides KWOK's default stages, the stage
// pod-image-updated (testdata/stages.yaml), which reflects a live pod's
// image change in its status as a kubelet would (KWOK does not by
// default).
//
// The test needs member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skips under -short.
package sidecars
