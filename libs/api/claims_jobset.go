package api

// A JobSet's claim templates (PodTemplate.VolumeClaimTemplates) give each
// index its own claim. A shard's Indexed Job has one pod template for all
// its indexes, so the claims are generic ephemeral volumes of that
// template: the member cluster that runs an index makes its pod a claim
// of its own, named "<pod>-<claim template>" and owned by the pod, and
// deletes it with the pod. The Job keeps a finished index's pod, and so
// its claim, until the JobSet is deleted or stopped; a failed index is
// retried in a new pod, with a new, empty claim (the data of a failed
// attempt is never moved or shared). Claims are never moved between
// clusters. Data that must outlive the JobSet belongs in a regional store.
//
// Quota: every index's claims count, from the start, towards the
// project's storage: Completions times the templates' sizes (DemandOf
// counts the claims of the Parallelism pods that run at once, and
// ClaimBytes the rest).

// ClaimBytes implements ClaimsStorage: the claims of the indexes beyond
// the Parallelism pods DemandOf counts, so that all Completions indexes'
// claims count.
func (s *JobSetSpec) ClaimBytes() int64 {
	return int64(max(s.Completions-s.Parallelism, 0)) * s.Template.ClaimBytesPerPod()
}
