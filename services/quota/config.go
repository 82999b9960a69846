package quota

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"atoll.dev/libs/api"
)

// Config is the quota policy of the region: the quota of a project with
// no limit of its own (none is unlimited), and how many workloads a
// project may hold.
type Config struct {
	// Defaults are every project's caps per tier where it has no limit of
	// its own, and the workload cap.
	Defaults api.QuotaDefaults
}

// DefaultLimits are the built-in default caps per tier: a new project may
// run modest OnDemand and Preemptible work, and nothing Reserved and no
// GPUs until a platform admin grants them.
const DefaultLimits = "OnDemand:cpu=16,memory=64Gi,gpus=0,pods=100,storage=100Gi;" +
	"Preemptible:cpu=16,memory=64Gi,gpus=0,pods=100,storage=100Gi;" +
	"Reserved:cpu=0,memory=0,gpus=0,pods=0,storage=0"

// DefaultConfig is the built-in policy: DefaultLimits and
// api.DefaultMaxWorkloads.
func DefaultConfig() *Config {
	lim, err := ParseLimits(DefaultLimits)
	if err != nil {
		panic(err) // a constant
	}
	return &Config{Defaults: api.QuotaDefaults{Limits: lim, MaxWorkloads: api.DefaultMaxWorkloads}}
}

// ParseLimits reads caps per tier written as
//
//	<Tier>:<resource>=<amount>,...;<Tier>:...
//
// with the resources cpu (cores, "500m"), memory, storage (bytes, "64Gi"),
// gpus and pods (counts). Every resource of every tier is a cap: a
// resource, or a tier, left out is 0, forbidden.
func ParseLimits(s string) (map[api.Tier]api.Limit, error) {
	out := map[api.Tier]api.Limit{}
	for _, t := range api.Tiers {
		out[t] = zeroLimit()
	}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, amounts, ok := strings.Cut(part, ":")
		tier, known := tierNamed(strings.TrimSpace(name))
		if !ok || !known {
			return nil, fmt.Errorf("default limits %q: want <Tier>:<resource>=<amount>,... with a tier of Reserved, OnDemand, Preemptible", part)
		}
		lim := zeroLimit()
		for kv := range strings.SplitSeq(amounts, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return nil, fmt.Errorf("default limits %s: %q: want <resource>=<amount>", tier, kv)
			}
			q, err := resource.ParseQuantity(strings.TrimSpace(v))
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("default limits %s: %s=%q: not an amount of 0 or more", tier, k, v)
			}
			switch strings.TrimSpace(k) {
			case api.ResourceCPU:
				*lim.MilliCPU = q.MilliValue()
			case api.ResourceMemory:
				*lim.MemoryBytes = q.Value()
			case "gpus", api.ResourceGPUName:
				*lim.GPUs = q.Value()
			case api.ResourcePods:
				*lim.Pods = q.Value()
			case api.ResourceStorage:
				*lim.StorageBytes = q.Value()
			default:
				return nil, fmt.Errorf("default limits %s: unknown resource %q (cpu, memory, gpus, pods, storage)", tier, k)
			}
		}
		out[tier] = lim
	}
	return out, nil
}

func zeroLimit() api.Limit {
	return api.Limit{MilliCPU: new(int64(0)), MemoryBytes: new(int64(0)), GPUs: new(int64(0)), Pods: new(int64(0)), StorageBytes: new(int64(0))}
}

func tierNamed(s string) (api.Tier, bool) {
	for _, t := range api.Tiers {
		if strings.EqualFold(s, string(t)) {
			return t, true
		}
	}
	return "", false
}

// Ample is a policy whose caps no development or test region reaches:
// 2^40 of every resource (GPUs included) in every tier, and a million
// workloads per project. atoll-dev and the end-to-end tests run with it;
// production never should.
func Ample() *Config {
	const n = int64(1) << 40
	lim := api.Limit{MilliCPU: new(n), MemoryBytes: new(n), GPUs: new(n), Pods: new(n), StorageBytes: new(n)}
	d := api.QuotaDefaults{Limits: map[api.Tier]api.Limit{}, MaxWorkloads: 1_000_000}
	for _, t := range api.Tiers {
		d.Limits[t] = lim
	}
	return &Config{Defaults: d}
}

// FormatLimits writes caps per tier as ParseLimits reads them (a
// resource a limit leaves unset is written as 0).
func FormatLimits(lim map[api.Tier]api.Limit) string {
	var parts []string
	for _, t := range api.Tiers {
		l, ok := lim[t]
		if !ok {
			continue
		}
		c := api.QuotaDefaults{Limits: map[api.Tier]api.Limit{t: l}}.Resolve(t, nil)
		parts = append(parts, fmt.Sprintf("%s:cpu=%dm,memory=%d,gpus=%d,pods=%d,storage=%d", t, c.MilliCPU, c.MemoryBytes, c.GPUs, c.Pods, c.StorageBytes))
	}
	return strings.Join(parts, ";")
}
