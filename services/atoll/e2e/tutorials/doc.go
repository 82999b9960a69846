// Package tutorials runs the tutorials of docs/tutorials as tests, so a
// tutorial that drifts from the product fails CI: every fenced block
// opened with ```sh is a command block, run in file order in one bash
// session per tutorial (set -Eeuo pipefail) against a fresh region of
// its own (three member clusters, zones a, b, c, self-service projects
// on), with the real `atoll` binary (and `nats`, when `make tools` built
// bin/nats) on PATH. Blocks opened with ```text or ```console are shown
// output and never run. Each tutorial's region starts while the
// tutorial before it runs.
//
// The session's environment: ATOLL_SERVER, ATOLL_CA (with TLS), the
// tokens ADMIN_TOKEN (platform admin, user admin), ALICE_TOKEN (user
// alice) and BOB_TOKEN (user bob), and ATOLL_TOKEN=$ALICE_TOKEN; a block
// switches user with `export ATOLL_TOKEN=$ADMIN_TOKEN`. A tutorial that
// runs `nats` also gets NATS_URL, the region's NATS on loopback TCP. The
// working directory is an empty temporary one, for files a tutorial
// writes.
//
// A failing command fails the tutorial's test with the file, the line of
// the command, and the output of its block. A tutorial that runs `nats`
// is skipped, saying so, when bin/nats is missing.
//
// The tutorials' tests need member clusters (libs/testenv: the binaries
// `make tools` builds, $ATOLL_BIN_DIR) and skip under -short; the
// runner's own tests do not.
package tutorials
