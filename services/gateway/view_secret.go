package gateway

import "atoll.dev/libs/api"

// specView is the spec a read shows. A Secret's values, in the clear or
// sealed, are never returned after the write: its view is its keys,
// version, digest, and who wrote its values and when. renderWorkload is
// the one path from a stored workload to a response (GET, list, watch,
// the console's stream, a write's answer, an idempotent replay).
func specView(spec api.Spec) any {
	s, ok := spec.(*api.SecretSpec)
	if !ok {
		return spec
	}
	v := *s
	v.Data, v.Sealed = nil, nil
	return &v
}
