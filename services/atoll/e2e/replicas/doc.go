// Package replicas holds the end-to-end tests of a region that runs two
// replicas of every service (region.Options.Replicas), in a region of its
// own so that the kills it makes never disturb the tests of package region.
//
// The tests kill (region.Kill: the replica's NATS connection closes first,
// so it can neither renew nor release a lease, as with kill -9) the holder
// of each lease in bus.BucketLeases in turn while Apps are created through
// the SDK against the gateway, restarting each killed replica so that a
// standby exists for the next kill, then check what issue 9 asks of N
// replicas: every workload converges, none is lost or duplicated, no member
// cluster is booked beyond its allocatable capacity, every takeover is
// within 10 s, and every create is accepted within 2 s of its first
// attempt. Other tests take admission and the NATS server away for 2 s.
//
// The tests need member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skip under -short. They print their figures
// as tables (go test -v) for the notes.
package replicas
