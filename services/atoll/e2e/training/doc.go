// Package training holds the end-to-end test of the TrainingJob kind (a
// gang placed whole in one member cluster, admitted whole: see
// api.KindTrainingJob and services/scheduler/kind_training.go) in a region of
// its own: three member clusters (zones a, b and c) whose KWOK runs its
// default stages except that a Job's Running pod labelled holdrunning
// stays Running (testdata/stages.yaml), so the gang's workers live long
// enough to be looked at, and whose chaos stage fails the Running pods
// labelled pod-container-running-failed.stage.kwok.x-k8s.io=true, for the
// failure policies. The test gives the zones GPU nodes of its own:
// zone-b room for 4 one-GPU a100 workers, zone-c for 2, and zone-a three
// h100 GPUs, so a 4-worker h100 gang fits nowhere.
//
// The test needs member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skips under -short.
package training
