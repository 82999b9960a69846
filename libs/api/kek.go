package api

// Key-encryption key rotation (`atoll-admin rotate-kek`): the propagator,
// which alone holds the private KEKs, rewraps each stored Secret's data key
// for the new KEK; admission, the workloads bucket's one writer, stores
// what it rewrapped. No value is decrypted into a reply or re-encrypted.

// KEKRotation asks the propagator to rewrap the data keys of stored
// Secrets sealed under any KEK but To, at most Limit of them in one call
// (0: a default), so a caller repeats it until Pending is 0.
type KEKRotation struct {
	// To is the KEK to rewrap for: admission must seal for it already and
	// the propagator must hold its private key.
	To string `json:"to"`
	// Limit bounds the Secrets rewrapped by one call.
	Limit int `json:"limit,omitempty"`
}

// KEKRotationResult is what one call of a rotation did and what is left.
type KEKRotationResult struct {
	// To is the KEK rewrapped for.
	To string `json:"to"`
	// Secrets is the number of stored Secrets seen.
	Secrets int `json:"secrets"`
	// Rewrapped is the number of Secrets this call rewrapped and stored.
	Rewrapped int `json:"rewrapped"`
	// Pending is the number of Secrets still sealed under another KEK.
	Pending int `json:"pending"`
	// Keys counts the Secrets per KEK id they are sealed under, after this
	// call: a KEK absent from it is referenced by no Secret.
	Keys map[string]int `json:"keys"`
	// Failed names the Secrets this call could not rewrap, with why (a
	// Secret changed meanwhile is retried by the next call).
	Failed []string `json:"failed,omitempty"`
}

// SecretRewrap is the propagator's request to admission to store a
// Secret's rewrapped data key: compare-and-set on Revision, the revision
// of the Secret the propagator read; Sealed must differ from the stored
// sealed data only in KeyID and WrappedKey.
type SecretRewrap struct {
	Project  string     `json:"project"`
	Name     string     `json:"name"`
	Revision uint64     `json:"revision"`
	Sealed   SealedData `json:"sealed"`
}
