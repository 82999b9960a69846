// Package config holds the end-to-end tests of Configs and Secrets and of
// the workloads that use them, in a region of its own: three member
// clusters (zones a, b, c).
//
// The tests need member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skip under -short.
package config
